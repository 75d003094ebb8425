"""rlcore's plugin API: every name a plugin may import, in one namespace, plus the API's version.

A plugin imports ``from rlcore import hookimpl`` and ``from rlcore.api import ...``; nothing else of rlcore.
Every other module (``rlcore.controller``, ``rlcore.workers``, ``rlcore.config.*``, ...) is private and may
change in any release, the way pytest's ``_pytest`` package is private behind the ``pytest`` namespace. The
names below are the public ones, grouped by what they are for; each is documented by its own docstring, and
``docs/api.md`` lists them.

:data:`API_VERSION` is the version of the contract between rlcore and its plugins (the hooks, the
``register`` callback, the component kinds and the names of this namespace), not of the rlcore distribution.
A plugin declares the range it supports in its hooks module, ``RLCORE_API = ">=3,<4"`` (a PEP 440 specifier),
and the loader refuses a plugin whose range excludes this version (:mod:`rlcore.plugins`).
``core/rlcore/api/surface.json`` is a snapshot of the API surface stored with the version it belongs to;
``python -m rlcore_testkit.surface`` checks or rewrites it, and ``docs/publishing.md`` says when to bump which part.

Importing this package imports only the standard library (no torch): the loader and the CLI import it at
start-up, through :mod:`rlcore.api.version` and :mod:`rlcore.api.kinds` (the ground floor of the import
graph; this namespace is its top floor). A name is imported from its module the first time it is used (:data:`_LAZY`); the
``TYPE_CHECKING`` block gives type checkers the same names (``tests/test_api_surface.py`` keeps the two equal).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rlcore.api.kinds import COMPONENT_KINDS, KINDS, KindSpec
from rlcore.api.version import API_RANGE_ATTRIBUTE, API_VERSION

#: public name -> ``module`` (the name is that module's attribute) or ``module:attribute`` (exported under
#: another name) or ``module:`` (the name is a submodule, used as a namespace)
_LAZY: dict[str, str] = {
    # errors
    "RLCoreError": "rlcore.errors",
    "ConfigError": "rlcore.config",
    "DataError": "rlcore.data",
    "UnknownComponentError": "rlcore.registry",
    "UserCodeExit": "rlcore.usercode",
    "exit_error": "rlcore.usercode",
    # the batch that flows between the controller, workers and components
    "Batch": "rlcore.api.batch",
    "BatchError": "rlcore.api.batch",
    "BatchIndexError": "rlcore.api.batch",
    "BatchKeyError": "rlcore.api.batch",
    "BatchTypeError": "rlcore.api.batch",
    "NonTensorValues": "rlcore.api.batch",
    "RowIndex": "rlcore.api.batch",
    # the component kinds' protocols and their capability specs
    "AdvantageEstimator": "rlcore.api.components",
    "AgentLoop": "rlcore.api.components",
    "AgentSample": "rlcore.api.components",
    "BatchFilter": "rlcore.api.components",
    "Dataset": "rlcore.api.components",
    "InteractionTurn": "rlcore.api.components",
    "PolicyLoss": "rlcore.api.components",
    "Preset": "rlcore.api.components",
    "RewardManager": "rlcore.api.components",
    "RewardResult": "rlcore.api.components",
    "RewardScorer": "rlcore.api.components",
    "RetrievedDocument": "rlcore.api.components",
    "Retriever": "rlcore.api.components",
    "ToolParser": "rlcore.api.components",
    "ToolResult": "rlcore.api.components",
    "Tracker": "rlcore.api.components",
    "RolloutEngine": "rlcore.api.rollout",
    # profiling: what a profiler plugin implements, and what a rollout engine asks of it
    "Profiler": "rlcore.api.profiling",
    "StepProfiler": "rlcore.api.profiling",
    "WorkerProfiler": "rlcore.api.profiling",
    "RolloutTrace": "rlcore.api.profiling",
    "EngineTrace": "rlcore.api.profiling",
    "claim_rollout_trace": "rlcore.api.profiling",
    "TrainingBackend": "rlcore.api.training",
    "TrainingEngine": "rlcore.api.training",
    # the engines' optional abilities, checked with isinstance
    "SupportsClose": "rlcore.api.rollout",
    # weight transport (kind weight_transport, checkpoint_engine.backend)
    "WeightTransport": "rlcore.api.transport",
    "WeightReceiver": "rlcore.api.transport",
    "WeightBucket": "rlcore.api.transport",
    "SparseDelta": "rlcore.api.transport",
    "TransportReport": "rlcore.api.transport",
    "BucketChecksumError": "rlcore.api.transport",
    "resolve_bucket": "rlcore.rollout.transport",
    "SupportsPartialRollout": "rlcore.api.rollout",
    "SupportsSamplingState": "rlcore.api.rollout",
    "SupportsSharedWeights": "rlcore.api.rollout",
    "SupportsWeightChecksum": "rlcore.api.rollout",
    "SupportsLiveWeights": "rlcore.api.training",
    "SupportsWeightStream": "rlcore.api.training",
    "AdvantageEstimatorSpec": "rlcore.api.specs",
    "CapabilitySpec": "rlcore.api.specs",
    "GroundTruthForm": "rlcore.api.specs",
    "PresetSpec": "rlcore.api.specs",
    "RewardScorerSpec": "rlcore.api.specs",
    "SpecError": "rlcore.api.specs",
    "TrainingBackendSpec": "rlcore.api.specs",
    "StepExtension": "rlcore.api.extensions",
    # run health: what a monitor sees, what it reports, its settings and capabilities
    "Finding": "rlcore.api.health",
    "HealthMonitor": "rlcore.api.health",
    "HealthView": "rlcore.api.health",
    "ResponseSample": "rlcore.api.health",
    "SEVERITIES": "rlcore.api.health",
    "MonitorSettings": "rlcore.config.sections.monitors",
    "HealthMonitorSpec": "rlcore.api.specs",
    # training engines: the request, the layout, the model's outputs and the batch keys they read or write
    "EngineRequest": "rlcore.api.training",
    "EngineRole": "rlcore.api.training",
    "MicroBatchLoss": "rlcore.api.training",
    "ModelOutput": "rlcore.api.training",
    "ParallelLayout": "rlcore.api.training",
    "GATHER_IDS": "rlcore.api.training",
    "GATHERED_LOG_PROBS": "rlcore.api.training",
    "ROUTED_EXPERTS": "rlcore.api.training",
    # rollout engines: sampling settings and seeds, a base for token-id engines, outputs, weight checks and buckets
    "ROLLOUT_KEY": "rlcore.config.keys",
    "SamplingParams": "rlcore.rollout.sampling",
    "RolloutSettings": "rlcore.rollout.sampling",
    "left_pad": "rlcore.rollout.padding",
    "request_seeds": "rlcore.rollout.sampling",
    "Completion": "rlcore.rollout.token_engine",
    "TokenListEngine": "rlcore.rollout.token_engine",
    "SpecialTokens": "rlcore.rollout.outputs",
    "check_left_padded": "rlcore.rollout.outputs",
    "engine_dtype": "rlcore.rollout.outputs",
    "rollout_output": "rlcore.rollout.outputs",
    "row_token_caps": "rlcore.rollout.outputs",
    "PartialRows": "rlcore.rollout.partial",
    "read_partial": "rlcore.rollout.partial",
    "continuation_seed": "rlcore.rollout.partial",
    "ROLLOUT_VERSIONS": "rlcore.rollout.partial",
    "FINISHED": "rlcore.rollout.partial",
    "ROW_SEEDS": "rlcore.rollout.partial",
    "check_weight_names": "rlcore.rollout.weights",
    "float64_sum": "rlcore.rollout.weights",
    "weight_buckets": "rlcore.rollout.buckets",
    # multi-turn: agent loops, tools, interactions and their trajectories
    "AgentContext": "rlcore.agents",
    "Interaction": "rlcore.agents",
    "Tool": "rlcore.agents",
    "ChatRenderer": "rlcore.agents",
    "Generation": "rlcore.agents",
    "MaskAuditError": "rlcore.agents",
    "Span": "rlcore.agents",
    "ToolCall": "rlcore.agents",
    "TraceSettings": "rlcore.agents",
    "Trajectory": "rlcore.agents",
    "TrajectoryTrace": "rlcore.agents",
    "audit_batch": "rlcore.agents",
    "with_text": "rlcore.agents",
    "TRACE_KEY": "rlcore.agents.tracing",
    "TraceBackend": "rlcore.agents.tracing",
    "recording": "rlcore.agents.tracing",
    "traced": "rlcore.agents.tracing",
    "MULTI_TURN_KEY": "rlcore.agents.settings",
    "AgentSettings": "rlcore.agents.settings",
    "tool_classes": "rlcore.agents.tools:class_entries",
    # the multi-turn seam: what a multi-turn plugin (rlcore-plugin-agents) implements
    "MultiTurn": "rlcore.api.multi_turn",
    "MultiTurnRunner": "rlcore.api.multi_turn",
    "agent_names": "rlcore.api.multi_turn",
    "Registry": "rlcore.registry",
    # data files
    "read_rows": "rlcore.data.rl_dataset",
    "MULTI_MODAL_INPUTS": "rlcore.data.multimodal",
    "load_image": "rlcore.data.multimodal",
    # processes a plugin starts for the run
    "mark_infrastructure": "rlcore.child_processes",
    "process_exists": "rlcore.child_processes",
    # rewards
    "NaiveRewardManager": "rlcore.reward",
    "RewardManagerBase": "rlcore.reward.managers",
    "RewardError": "rlcore.reward",
    "ground_truth_as_text": "rlcore.reward.ground_truth",
    # the algorithm math: losses, advantages' building blocks, KL, metrics
    "ActorLossTerm": "rlcore.algos",
    "LOG_RATIO_CLAMP": "rlcore.algos",
    "agg_loss": "rlcore.algos",
    "clip_ratio_bounds": "rlcore.algos",
    "entropy_from_logits": "rlcore.algos",
    "group_ids": "rlcore.algos",
    "group_stats": "rlcore.algos",
    "kl_penalty": "rlcore.algos",
    "logprobs_from_logits": "rlcore.algos",
    "masked_mean": "rlcore.algos",
    "masked_sum": "rlcore.algos",
    "masked_whiten": "rlcore.algos",
    "sum_pi_squared_from_logits": "rlcore.algos",
    "vanilla_policy_loss": "rlcore.algos",
    # reading the config: typed helpers, the batch arithmetic, dtypes, verl's router-replay keys
    "select": "rlcore.config.keys",
    "positive_int": "rlcore.config.keys",
    "parse_dtype": "rlcore.dtypes",
    "LOG_PROB_BUDGET": "rlcore.config.batch_sizes",
    "UpdateBatchSizes": "rlcore.config.batch_sizes",
    "data_parallel_size": "rlcore.config.batch_sizes",
    "inference_micro_batch_size": "rlcore.config.batch_sizes",
    "token_budget": "rlcore.config.batch_sizes",
    "ppo_batch_sizes": "rlcore.config.batch_sizes",
    "ActorConfig": "rlcore.config.schema",
    "DataConfig": "rlcore.config.schema",
    "ModelConfig": "rlcore.config.schema",
    "MtpConfig": "rlcore.config.schema",
    "AlgorithmConfig": "rlcore.config.schema",
    "RewardModelConfig": "rlcore.config.schema",
    "RefConfig": "rlcore.config.schema",
    "RolloutConfig": "rlcore.config.schema",
    "CheckpointEngineConfig": "rlcore.config.schema",
    "TrainerConfig": "rlcore.config.schema",
    "default_section": "rlcore.config.schema",
    "OptimConfig": "rlcore.config.sections.actor",
    "Section": "rlcore.config.sections.base",
    "config_ref": "rlcore.config.sections.base:ref",
    "extended_section": "rlcore.config.plugin_sections",
    "plugin_section": "rlcore.config.plugin_sections",
    "resolved_config": "rlcore.cli",
    # the run directory and its files, as the console names them (rlcore-plugin-report)
    "METRICS_FILE": "rlcore.tracking.sinks",
    "PRESETS_FILE": "rlcore.presets",
    "read_metrics": "rlcore.tracking.sinks",
    "format_value": "rlcore.tracking.sinks",
    "short_label": "rlcore.tracking.progress",
    "shown_path": "rlcore.config.output_paths",
    "disk_problem": "rlcore.checkpoint.disk",
    # the rollout memory arithmetic (the HF engine's chunks, rlcore plan), devices' peak FLOP/s and the hub
    "ModelShape": "rlcore.rollout.sizing",
    "STEP_VOCAB_COPIES": "rlcore.rollout.sizing",
    "CACHE_ALIGN": "rlcore.rollout.sizing",
    "aligned_length": "rlcore.rollout.sizing",
    "bucket": "rlcore.rollout.sizing",
    "bucket_floor": "rlcore.rollout.sizing",
    "row_bytes": "rlcore.rollout.sizing",
    "table_peak_flops": "rlcore.tracking.device_peak",
    "HUB": "rlcore.model_check",
    "hub_unreachable": "rlcore.model_check",
    "REPLAY_MODES": "rlcore.config.router_replay",
    "ROUTER_REPLAY_ACTOR": "rlcore.config.router_replay:ACTOR",
    "replay_mode": "rlcore.config.router_replay",
    # an algorithm's own worker: rank set-up, micro-batches and the PPO update loop
    "WorkerBase": "rlcore.workers.base",
    "cpu_batch": "rlcore.workers.base",
    "plan_micro_batches": "rlcore.workers.micro_batches",
    "UpdateSettings": "rlcore.workers.ppo_loop",
    "ppo_update": "rlcore.workers.ppo_loop",
    # the engine kit: devices, optimizers, transformers models and what engines switch on in them
    "DEVICE_KEY": "rlcore.modelkit.distributed",
    "resolve_device": "rlcore.modelkit.distributed",
    "OptimizerState": "rlcore.modelkit.optim",
    "build_lr_scheduler": "rlcore.modelkit.optim",
    "build_optimizer": "rlcore.modelkit.optim",
    "ValueModel": "rlcore.modelkit.hf_models",
    "config_overrides": "rlcore.modelkit.hf_models",
    "enable_activation_checkpointing": "rlcore.modelkit.hf_models",
    "hf_model": "rlcore.modelkit.hf_models",
    "load_pretrained": "rlcore.modelkit.hf_models",
    "response_outputs": "rlcore.modelkit.hf_models",
    "response_values": "rlcore.modelkit.hf_models",
    "pad_multiple": "rlcore.modelkit.packing",
    "activation_offload": "rlcore.modelkit.activation_offload",
    "apply_kernel_switches": "rlcore.modelkit.kernels",
    "check_kernel_switches": "rlcore.modelkit.kernels",
    "fused_backend": "rlcore.modelkit.kernels",
    "EngineRouting": "rlcore.modelkit.moe",
    "engine_routing": "rlcore.modelkit.moe",
    "load_balancing_loss": "rlcore.modelkit.moe",
    "sparse_routers": "rlcore.modelkit.moe",
    "grouper_key": "rlcore.modelkit.prefix_grouper",
    "add_id_outputs": "rlcore.modelkit.token_ids",
    "freeze_vision_tower": "rlcore.modelkit.vlm",
    "is_vision_language": "rlcore.modelkit.vlm",
    "load_policy": "rlcore.modelkit.vlm",
    "rollout_prefill": "rlcore.modelkit.vlm",
    "rope_owner": "rlcore.modelkit.vlm",
    "token_types": "rlcore.modelkit.vlm",
    "sequence_parallel": "rlcore.modelkit.sequence_parallel:",
    "load_processor": "rlcore.processors",
    # a plugin's own trainer (a trainer kind, ``rlcore sft``): the run machinery, its config tree and loop helpers
    "RunKit": "rlcore.runkit",
    "PluginRun": "rlcore.runkit",
    "RunCheckpoints": "rlcore.runkit",
    "ConfigSource": "rlcore.config.compose:Source",
    "Problems": "rlcore.config.problems",
    "load_config_tree": "rlcore.config.own_tree",
    "parse_command_line": "rlcore.config.compose",
    "default_config": "rlcore.config.loader",
    "config_to_yaml": "rlcore.config.loader",
    "legacy_per_rank": "rlcore.config.batch_sizes",
    "OPTIM_RANGES": "rlcore.config.ranges",
    "range_problems": "rlcore.config.ranges",
    "WorkerGroup": "rlcore.api.groups",
    "ActorRolloutRefWorker": "rlcore.workers.actor",
    "PromptLoader": "rlcore.data.loader",
    "collate_rows": "rlcore.data.collate",
    "reduce_metrics": "rlcore.tracking.values",
    "compute_throughput_metrics": "rlcore.algos.metrics",
    # driving rlcore from Python and testing a plugin (rlcore-testkit): the plugin machinery, in-process runs and
    # commands, the config loader, the critic worker, and what the contract suites check components against
    "PluginManager": "rlcore.plugins",
    "PluginRecord": "rlcore.plugins",
    "make_plugin_manager": "rlcore.plugins",
    "set_plugin_manager": "rlcore.plugins",
    "Component": "rlcore.registry",
    "PUBLIC_MODULES": "rlcore.public_api",
    "cli": "rlcore.cli",
    "run_training": "rlcore.run",
    "warm_ray_workers": "rlcore.controller.placement",
    "load_config": "rlcore.config",
    "CriticWorker": "rlcore.workers.critic",
    "AbstractCurriculumSampler": "rlcore.data.sampler",
    "LOSS_AGG_MODES": "rlcore.config.algorithm_names",
    "state_checksum": "rlcore.rollout.weights",
    "build_image_only_processor": "rlcore.processors",
    # the API's description of itself: its lazy table, which its snapshot and reference docs read (rlcore-testkit)
    "LazyName": "rlcore.api.lazy_table",
    "read_lazy_table": "rlcore.api.lazy_table",
    # reading data rows: files and folders, where a row came from, text checks (SFT's dataset)
    "normalize_files": "rlcore.data.files",
    "RowOrigin": "rlcore.data.rl_dataset",
    "check_unicode": "rlcore.data.rl_dataset",
    "config_value": "rlcore.data.rl_dataset",
    "to_plain": "rlcore.config.sections.base",
    "tokenizer_failure": "rlcore.data.rl_dataset",
    "mask_spans": "rlcore.agents.audit",
    # experiment trackers
    "ExternalTracker": "rlcore.tracking.external",
    "TrackerConfigError": "rlcore.tracking.external",
    "TrackerDependencyError": "rlcore.tracking.external",
    "check_choice": "rlcore.tracking.external",
    "flatten": "rlcore.tracking.external",
    "numeric_metrics": "rlcore.tracking.external",
    "setting_or_env": "rlcore.tracking.external",
    "table_data": "rlcore.tracking.external",
    "tracker_section": "rlcore.tracking.external",
}

if TYPE_CHECKING:
    from rlcore.agents import (
        AgentContext,
        ChatRenderer,
        Generation,
        Interaction,
        MaskAuditError,
        Span,
        Tool,
        ToolCall,
        TraceSettings,
        Trajectory,
        TrajectoryTrace,
        audit_batch,
        with_text,
    )
    from rlcore.agents.audit import mask_spans
    from rlcore.agents.settings import MULTI_TURN_KEY, AgentSettings
    from rlcore.agents.tools import class_entries as tool_classes
    from rlcore.agents.tracing import TRACE_KEY, TraceBackend, recording, traced
    from rlcore.algos import (
        LOG_RATIO_CLAMP,
        ActorLossTerm,
        agg_loss,
        clip_ratio_bounds,
        entropy_from_logits,
        group_ids,
        group_stats,
        kl_penalty,
        logprobs_from_logits,
        masked_mean,
        masked_sum,
        masked_whiten,
        sum_pi_squared_from_logits,
        vanilla_policy_loss,
    )
    from rlcore.algos.metrics import compute_throughput_metrics
    from rlcore.api.batch import (
        Batch,
        BatchError,
        BatchIndexError,
        BatchKeyError,
        BatchTypeError,
        NonTensorValues,
        RowIndex,
    )
    from rlcore.api.components import (
        AdvantageEstimator,
        AgentLoop,
        AgentSample,
        BatchFilter,
        Dataset,
        InteractionTurn,
        PolicyLoss,
        Preset,
        RetrievedDocument,
        Retriever,
        RewardManager,
        RewardResult,
        RewardScorer,
        ToolParser,
        ToolResult,
        Tracker,
    )
    from rlcore.api.extensions import StepExtension
    from rlcore.api.groups import WorkerGroup
    from rlcore.api.health import SEVERITIES, Finding, HealthMonitor, HealthView, ResponseSample
    from rlcore.api.lazy_table import LazyName, read_lazy_table
    from rlcore.api.multi_turn import MultiTurn, MultiTurnRunner, agent_names
    from rlcore.api.profiling import (
        EngineTrace,
        Profiler,
        RolloutTrace,
        StepProfiler,
        WorkerProfiler,
        claim_rollout_trace,
    )
    from rlcore.api.rollout import (
        RolloutEngine,
        SupportsClose,
        SupportsPartialRollout,
        SupportsSamplingState,
        SupportsSharedWeights,
        SupportsWeightChecksum,
    )
    from rlcore.api.specs import (
        AdvantageEstimatorSpec,
        CapabilitySpec,
        GroundTruthForm,
        HealthMonitorSpec,
        PresetSpec,
        RewardScorerSpec,
        SpecError,
        TrainingBackendSpec,
    )
    from rlcore.api.training import (
        GATHER_IDS,
        GATHERED_LOG_PROBS,
        ROUTED_EXPERTS,
        EngineRequest,
        EngineRole,
        MicroBatchLoss,
        ModelOutput,
        ParallelLayout,
        SupportsLiveWeights,
        SupportsWeightStream,
        TrainingBackend,
        TrainingEngine,
    )
    from rlcore.api.transport import (
        BucketChecksumError,
        SparseDelta,
        TransportReport,
        WeightBucket,
        WeightReceiver,
        WeightTransport,
    )
    from rlcore.checkpoint.disk import disk_problem
    from rlcore.child_processes import mark_infrastructure, process_exists
    from rlcore.cli import cli, resolved_config
    from rlcore.config import ConfigError, load_config
    from rlcore.config.algorithm_names import LOSS_AGG_MODES
    from rlcore.config.batch_sizes import (
        LOG_PROB_BUDGET,
        UpdateBatchSizes,
        data_parallel_size,
        inference_micro_batch_size,
        legacy_per_rank,
        ppo_batch_sizes,
        token_budget,
    )
    from rlcore.config.compose import Source as ConfigSource
    from rlcore.config.compose import parse_command_line
    from rlcore.config.keys import ROLLOUT_KEY, positive_int, select
    from rlcore.config.loader import config_to_yaml, default_config
    from rlcore.config.output_paths import shown_path
    from rlcore.config.own_tree import load_config_tree
    from rlcore.config.plugin_sections import extended_section, plugin_section
    from rlcore.config.problems import Problems
    from rlcore.config.ranges import OPTIM_RANGES, range_problems
    from rlcore.config.router_replay import ACTOR as ROUTER_REPLAY_ACTOR
    from rlcore.config.router_replay import REPLAY_MODES, replay_mode
    from rlcore.config.schema import (
        ActorConfig,
        AlgorithmConfig,
        CheckpointEngineConfig,
        DataConfig,
        ModelConfig,
        MtpConfig,
        RefConfig,
        RewardModelConfig,
        RolloutConfig,
        TrainerConfig,
        default_section,
    )
    from rlcore.config.sections.actor import OptimConfig
    from rlcore.config.sections.base import Section, to_plain
    from rlcore.config.sections.base import ref as config_ref
    from rlcore.config.sections.monitors import MonitorSettings
    from rlcore.controller.placement import warm_ray_workers
    from rlcore.data import DataError
    from rlcore.data.collate import collate_rows
    from rlcore.data.files import normalize_files
    from rlcore.data.loader import PromptLoader
    from rlcore.data.multimodal import MULTI_MODAL_INPUTS, load_image
    from rlcore.data.rl_dataset import RowOrigin, check_unicode, config_value, read_rows, tokenizer_failure
    from rlcore.data.sampler import AbstractCurriculumSampler
    from rlcore.dtypes import parse_dtype
    from rlcore.errors import RLCoreError
    from rlcore.model_check import HUB, hub_unreachable
    from rlcore.modelkit import sequence_parallel
    from rlcore.modelkit.activation_offload import activation_offload
    from rlcore.modelkit.distributed import DEVICE_KEY, resolve_device
    from rlcore.modelkit.hf_models import (
        ValueModel,
        config_overrides,
        enable_activation_checkpointing,
        hf_model,
        load_pretrained,
        response_outputs,
        response_values,
    )
    from rlcore.modelkit.kernels import apply_kernel_switches, check_kernel_switches, fused_backend
    from rlcore.modelkit.moe import EngineRouting, engine_routing, load_balancing_loss, sparse_routers
    from rlcore.modelkit.optim import OptimizerState, build_lr_scheduler, build_optimizer
    from rlcore.modelkit.packing import pad_multiple
    from rlcore.modelkit.prefix_grouper import grouper_key
    from rlcore.modelkit.token_ids import add_id_outputs
    from rlcore.modelkit.vlm import (
        freeze_vision_tower,
        is_vision_language,
        load_policy,
        rollout_prefill,
        rope_owner,
        token_types,
    )
    from rlcore.plugins import PluginManager, PluginRecord, make_plugin_manager, set_plugin_manager
    from rlcore.presets import PRESETS_FILE
    from rlcore.processors import build_image_only_processor, load_processor
    from rlcore.public_api import PUBLIC_MODULES
    from rlcore.registry import Component, Registry, UnknownComponentError
    from rlcore.reward import NaiveRewardManager, RewardError
    from rlcore.reward.ground_truth import ground_truth_as_text
    from rlcore.reward.managers import RewardManagerBase
    from rlcore.rollout.buckets import weight_buckets
    from rlcore.rollout.outputs import SpecialTokens, check_left_padded, engine_dtype, rollout_output, row_token_caps
    from rlcore.rollout.padding import left_pad
    from rlcore.rollout.partial import (
        FINISHED,
        ROLLOUT_VERSIONS,
        ROW_SEEDS,
        PartialRows,
        continuation_seed,
        read_partial,
    )
    from rlcore.rollout.sampling import RolloutSettings, SamplingParams, request_seeds
    from rlcore.rollout.sizing import (
        CACHE_ALIGN,
        STEP_VOCAB_COPIES,
        ModelShape,
        aligned_length,
        bucket,
        bucket_floor,
        row_bytes,
    )
    from rlcore.rollout.token_engine import Completion, TokenListEngine
    from rlcore.rollout.transport import resolve_bucket
    from rlcore.rollout.weights import check_weight_names, float64_sum, state_checksum
    from rlcore.run import run_training
    from rlcore.runkit import PluginRun, RunCheckpoints, RunKit
    from rlcore.tracking.device_peak import table_peak_flops
    from rlcore.tracking.external import (
        ExternalTracker,
        TrackerConfigError,
        TrackerDependencyError,
        check_choice,
        flatten,
        numeric_metrics,
        setting_or_env,
        table_data,
        tracker_section,
    )
    from rlcore.tracking.progress import short_label
    from rlcore.tracking.sinks import METRICS_FILE, format_value, read_metrics
    from rlcore.tracking.values import reduce_metrics
    from rlcore.usercode import UserCodeExit, exit_error
    from rlcore.workers.actor import ActorRolloutRefWorker
    from rlcore.workers.base import WorkerBase, cpu_batch
    from rlcore.workers.critic import CriticWorker
    from rlcore.workers.micro_batches import plan_micro_batches
    from rlcore.workers.ppo_loop import UpdateSettings, ppo_update


def _target(name: str) -> tuple[str, str | None]:
    """Where public ``name`` lives: ``(module, attribute)``, or ``(module, None)`` when the name is the module."""
    from rlcore.api.lazy_table import split_target

    return split_target(name, _LAZY[name])


def __getattr__(name: str) -> Any:
    """Import public ``name`` from its module the first time it is used, and keep it."""
    if name not in _LAZY:
        raise AttributeError(f"module 'rlcore.api' has no attribute {name!r}")
    module, attribute = _target(name)
    value = importlib.import_module(module)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = ["API_RANGE_ATTRIBUTE", "API_VERSION", "COMPONENT_KINDS", "KINDS", "KindSpec", *_LAZY]
