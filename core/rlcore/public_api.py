"""The modules a plugin may import: rlcore's declared public API.

Everything a plugin needs from the core is in one of these modules; everything else (the registry, the
controller, the generic workers, the built-in implementations) may change in any release.
``tests/test_boundaries.py`` checks that every bundled plugin and the plugin template import nothing else
from rlcore, and ``docs/publishing.md`` explains the compatibility promise.
"""

from __future__ import annotations

#: public modules; an entry ending in ``.*`` makes every submodule of that package public too
PUBLIC_MODULES: tuple[str, ...] = (
    "rlcore",  # hookimpl, hookspec, get_component, load_plugins, __version__
    "rlcore.errors",  # RLCoreError
    "rlcore.api.batch",  # Batch
    "rlcore.api.specs",  # the capability specs a component is registered with (spec=...)
    "rlcore.api.components",  # the protocol of every component kind
    "rlcore.algos",  # the algorithm math: losses, advantages' building blocks, KL, metrics
    "rlcore.config",  # load_config, ConfigError
    "rlcore.config.router_replay",  # replay_mode, REPLAY_MODES: verl's router_replay keys, for engines
    "rlcore.config.keys",  # select, positive_int
    "rlcore.dtypes",  # parse_dtype
    "rlcore.reward",  # RewardResult, RewardError, NaiveRewardManager
    "rlcore.sandbox",  # run_python: model-written code under limits, for tools and code rewards
    "rlcore.agents",  # Tool, Interaction, AgentLoop, Trajectory, ToolCall, audit_batch: multi-turn components
    "rlcore.api.rollout",  # the RolloutEngine protocol
    "rlcore.rollout.sampling",  # SamplingParams, ROLLOUT_KEY
    "rlcore.rollout.token_engine",  # TokenListEngine, Completion: a base for token-id rollout engines
    "rlcore.rollout.buckets",  # weight_buckets: a weight sync in buckets of bounded size
    "rlcore.api.training",  # the TrainingEngine / TrainingBackend contract
    "rlcore.modelkit.optim",  # AdamW and verl's learning-rate schedule, for engines
    "rlcore.modelkit.distributed",  # device, process group, seeding and RNG state, for engines
    "rlcore.api.extensions",  # StepExtension: a plugin's worker group, step stage and actor loss term
    "rlcore.workers.base",  # WorkerBase: the rank set-up and engines of an algorithm's own worker (PRIME's PRM)
    "rlcore.config.batch_sizes",  # UpdateBatchSizes and the batch arithmetic, for such workers
    "rlcore.config.schema",  # the typed config sections (Sections.from_tree) the batch arithmetic takes
    "rlcore.workers.micro_batches",  # plan_micro_batches, for such workers
    "rlcore.workers.ppo_loop",  # ppo_update: the mini/micro-batch update loop, for such workers
    "rlcore.modelkit.hf_models",  # loading, value model, log-probs and values of transformers models
    "rlcore.modelkit.packing",  # sequence packing (use_remove_padding)
    "rlcore.modelkit.prefix_grouper",  # the shared-prompt forward (actor.use_prefix_grouper): grouper_key
    "rlcore.modelkit.sequence_parallel",  # Ulysses sequence parallelism
    "rlcore.modelkit.kernels",  # the use_liger / use_torch_compile switches
    "rlcore.modelkit.vlm",  # vision-language models: loader class, images and mrope positions, vision tower
    "rlcore.modelkit.moe",  # mixture-of-experts routers: load-balancing loss, expert load, routing record/replay
    "rlcore.modelkit.token_ids",  # log-probs at given token ids and the top-k (GATHER_IDS, forward(top_k=...))
    "rlcore.profiling.rollout",  # rollout engines that trace their own generation (traces_itself)
    "rlcore.profiling.torch_options",  # the roles' profiler.tool_config.torch sections, read and checked
    "rlcore.processors",  # load_processor: a model's multimodal processor (also without torchvision)
    "rlcore.modelkit.activation_offload",  # enable_activation_offload: saved activations in host memory
    "rlcore.tracking.external",  # ExternalTracker and the tracker helpers
    "rlcore.cli",  # resolved_config: the config `rlcore run ARGS` would use, for plugin commands (rlcore plan)
    "rlcore.config.output_paths",  # shown_path: a path as the console shows it (rlcore-plugin-report)
    "rlcore.checkpoint.disk",  # disk_problem: why a folder cannot be written (rlcore-plugin-report)
    "rlcore.presets",  # PRESETS_FILE: the run directory's presets record (rlcore-plugin-report)
    "rlcore.tracking.progress",  # short_label: the metric names the report's legends use (rlcore-plugin-report)
    "rlcore.tracking.sinks",  # read_metrics, METRICS_FILE, format_value: a run's metrics.jsonl (rlcore-plugin-report)
    "rlcore.tracking.device_peak",  # table_peak_flops: the GPUs' peak FLOP/s (rlcore-plugin-plan)
    "rlcore.rollout.chunking",  # ModelShape and the HF engine's chunk arithmetic (rlcore-plugin-plan)
    "rlcore.model_check",  # HUB, hub_unreachable: a hub model's config offline (rlcore-plugin-plan)
    "rlcore.testing.*",  # fixtures, tiny models and the contract suites
)


def is_public(module: str) -> bool:
    """Whether a plugin may import ``module`` (see :data:`PUBLIC_MODULES`)."""
    for entry in PUBLIC_MODULES:
        if entry.endswith(".*"):
            package = entry[:-2]
            if module == package or module.startswith(package + "."):
                return True
        elif module == entry:
            return True
    return False
