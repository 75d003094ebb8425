"""verl features that rlcore does not have (yet), by the config keys and values that ask for them.

A key that no default declares is an error anyway; when it belongs to one of the features below, the error
names the feature (and, for a feature a plugin provides, the ``pip install`` line) instead of only offering
a close match. Keys are matched after verl spellings are renamed (:mod:`rlcore.config.aliases`); ``*``
matches one key part. ``docs/from-verl.md`` shows the same table, and a test checks it against both this
table and verl's default config.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omegaconf import DictConfig

MEGATRON_HINT = "these need the Megatron backend plugin: pip install rlcore-plugin-megatron"
#: the hint of :data:`MEGATRON_HINT`'s keys when the plugin is installed (its ``megatron`` sections exist)
MEGATRON_INSTALLED_HINT = "rlcore-plugin-megatron is installed but does not support these settings yet"
NOT_YET = "not supported by rlcore yet"


@dataclass(frozen=True, eq=False)
class MissingFeature:
    """A verl feature rlcore lacks: the key prefixes that configure it, its name and what the user can do.

    ``off`` holds the keys whose value turns the feature off in verl (``multi_turn.enable: false``): set to
    that value, such a key asks for what rlcore does anyway and is accepted (it adds nothing to the config).
    """

    feature: str
    patterns: tuple[str, ...]
    hint: str = NOT_YET
    off: Mapping[str, Any] = field(default_factory=dict)

    def matches(self, key: str) -> bool:
        """Whether the dotted ``key`` is one of this feature's keys (or below one)."""
        parts = key.split(".")
        return any(prefix_match(pattern.split("."), parts) for pattern in self.patterns)


def prefix_match(pattern: list[str], parts: list[str]) -> bool:
    """Whether the key ``parts`` are the ``pattern``'s parts or lie below them (``*`` matches any one part)."""
    return len(parts) >= len(pattern) and all(p in ("*", k) for p, k in zip(pattern, parts))


ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "actor_rollout_ref.rollout", "critic", "reward_model")
#: the roles with a training engine's section (verl 0.10's ``fsdp``, ``megatron``, ``torchtitan``, ``veomni``)
ENGINE_ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")
#: the roles with an optimizer
TRAINED_ROLES = ("actor_rollout_ref.actor", "critic")
#: the roles whose profiler section verl 0.10 gives copies of global_profiler's relocation and hook keys
PROFILED_ROLES = ROLES[:4]
#: those keys, at the values that leave them to global_profiler
_PROFILER_HOOK_OFF: dict[str, Any] = {
    "relocate_results": False,
    "finish_hook_cmd": None,
    "finish_hook_all_ranks": False,
    "finish_hook_ranks": [],
}
#: the settings of verl's serving engine (its ``RolloutConfig``) that a generating reward model and a distillation
#: teacher share, in verl's order; neither runs one here
SERVING_ENGINE_KEYS = (
    "dtype",
    "enforce_eager",
    "cudagraph_capture_sizes",
    "free_cache_engine",
    "expert_parallel_size",
    "max_num_batched_tokens",
    "max_num_seqs",
    "load_format",
    "engine_kwargs",
    "limit_images",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "disable_log_stats",
    "skip_tokenizer_init",
)
#: a distillation teacher's (``teacher_models.<name>.inference.*``): no counterpart where the teacher is scored by
#: the training backend's forward (its expert-parallel size is rlcore-plugin-distill's: a layout of verl's server)
TEACHER_SERVING_KEYS = (
    *(key for key in SERVING_ENGINE_KEYS if key != "expert_parallel_size"),
    "prompt_length",
    "response_length",
    "temperature",
)

MISSING_FEATURES: tuple[MissingFeature, ...] = (
    MissingFeature(
        "verl's Megatron backend settings",
        (
            "actor_rollout_ref.actor.megatron",
            "actor_rollout_ref.ref.megatron",
            "critic.megatron",
            "reward_model.megatron",
            "actor_rollout_ref.actor.optim.override_optimizer_config",
            "critic.optim.override_optimizer_config",
            "actor_rollout_ref.model.lora",
            "critic.model.lora",
        ),
        MEGATRON_HINT,
        # verl's bshd format (padded rows): what rlcore's Megatron engine computes; true (packed thd) is refused,
        # and with it padding packed micro-batches (megatron.pad_to_length)
        off={
            **{f"{role}.megatron.use_remove_padding": False for role in ENGINE_ROLES},
            **{f"{role}.megatron.pad_to_length": False for role in ENGINE_ROLES},
        },
    ),
    MissingFeature(
        "Nsight/NPU profiling options and verl's older profiler keys (rlcore profiles with global_profiler.tool=torch, "
        "torch_memory, nsys, whose NVTX ranges need the run launched under nsys, or npu, recorded by torch.profiler)",
        (
            "global_profiler.global_tool_config.nsys",
            "global_profiler.global_tool_config.npu",
            *(f"{role}.profiler.{key}" for role in ROLES for key in ("tool", "save_path")),
            *(
                f"{role}.profiler.tool_config.{tool}"
                for role in ROLES
                if role != "reward_model"
                for tool in ("nsys", "torch_memory", "precision_debugger")
            ),
            "reward_model.profiler.tool_config",
            "trainer.profile_steps",
            "trainer.profile_continuous_steps",
            "trainer.controller_nsight_options",
            "trainer.worker_nsight_options",
            "trainer.npu_profile",
        ),
        "docs/profiling.md",
        off={
            **{f"{role}.profiler.tool": None for role in ROLES},
            **{f"{role}.profiler.save_path": None for role in ROLES},
        },
    ),
    MissingFeature(
        "multi-turn settings other than verl's core keys (rlcore renders new messages only, never re-tokenizes)",
        (
            "actor_rollout_ref.rollout.multi_turn.use_inference_chat_template",
            "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode",
            "actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts",
            "actor_rollout_ref.rollout.agent.num_workers",
            "actor_rollout_ref.rollout.agent.agent_loop_config_path",
            "actor_rollout_ref.rollout.agent.custom_async_server",
            "data.tool_config_path",
        ),
        off={
            "actor_rollout_ref.rollout.multi_turn.use_inference_chat_template": False,
            "actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts": None,
            "actor_rollout_ref.rollout.agent.agent_loop_config_path": None,
            "actor_rollout_ref.rollout.agent.custom_async_server.path": None,
            "actor_rollout_ref.rollout.agent.custom_async_server.name": None,
        },
    ),
    MissingFeature(
        "this multimodal data option of verl (rlcore: images and videos through the model's processor, whose "
        "tensors every multimodal row carries)",
        ("data.return_multi_modal_inputs",),
        off={"data.return_multi_modal_inputs": True},
    ),
    MissingFeature(
        "these reward-model options of verl (sequence parallelism, reward-loop classes, its generation engine's settings)",
        (
            "reward_model.model.external_lib",
            "reward_model.ulysses_sequence_parallel_size",
            "reward_model.reward_loop_source",
            "reward_model.reward_loop_module_path",
            "reward_model.reward_loop_class_name",
            *(f"reward_model.rollout.{key}" for key in (*SERVING_ENGINE_KEYS, "data_parallel_size", "max_model_len")),
        ),
        off={"reward_model.reward_loop_source": "register"},
    ),
    MissingFeature(
        "reward managers loaded from a file (reward_manager.source=importlib)",
        (
            "reward_manager.source",
            "reward_manager.module",
            "reward.reward_manager.source",
            "reward.reward_manager.module",
        ),
    ),
    MissingFeature(
        "multi-token prediction (MTP) outside the policy model (rlcore reads actor_rollout_ref.model.mtp, which verl's "
        "rollout.mtp mirrors)",
        ("actor_rollout_ref.rollout.mtp", "critic.model.mtp", "reward_model.rollout.mtp"),
    ),
    MissingFeature(
        "verl's Megatron-Lite engine settings that rlcore's Megatron engine (which trains mlite_actor here) has no "
        "equal for: its model and implementation choices (model_name, impl, custom_backend_module), the export dtype, "
        "the router's auxiliary-loss coefficient, its forward-only switch and impl_cfg keys other than use_thd, "
        "optimizer and recompute",
        ("actor_rollout_ref.actor.engine", "actor_rollout_ref.ref.engine", "critic.engine"),
    ),
    MissingFeature(
        "verl's TorchTitan engine settings that rlcore's FSDP engine (which trains model_engine=torchtitan here) has "
        "no equal for: tensor, pipeline, context and expert parallelism (sizes > 1), replication apart from "
        "fsdp_size (data_parallel_replicate_size > 1), its wrap policy, its forward-only switch and its seed",
        tuple(f"{role}.torchtitan" for role in ENGINE_ROLES),
        off={
            f"{role}.torchtitan.{key}": value
            for role in ENGINE_ROLES
            for key, value in (
                ("tensor_parallel_size", 1),
                ("pipeline_parallel_size", 1),
                ("context_parallel_size", 1),
                ("expert_parallel_size", 1),
                ("data_parallel_replicate_size", 1),
                ("wrap_policy.min_num_params", 0),
                ("forward_only", False),
                ("seed", 42),
            )
        },
    ),
    MissingFeature(
        "verl's TorchTitan optimizer settings other than rlcore's AdamW at a constant rate: another optimizer "
        "(name), eps other than 1e-8, a decaying schedule (min_lr_factor < 1, verl's default: set min_lr_factor=1.0 "
        "for the actor and the critic) and the reference model's optimizer",
        (
            "actor_rollout_ref.ref.optim",
            *(
                f"{role}.optim.{key}"
                for role in TRAINED_ROLES
                for key in ("name", "eps", "decay_type", "min_lr_factor")
            ),
        ),
        off={
            f"{role}.optim.{key}": value
            for role in TRAINED_ROLES
            for key, value in (("name", "AdamW"), ("eps", 1e-8), ("decay_type", "linear"), ("min_lr_factor", 1.0))
        },
    ),
    MissingFeature(
        "verl's VeOmni engine settings that rlcore's FSDP engine (which trains model_engine=veomni here) has no equal "
        "for: expert parallelism (expert_parallel_size > 1), init_device=npu, VeOmni's checkpoint manager and "
        "checkpoint path, FSDP1's CPU offload, its seed, determinism, load-balance monitor and forward-only switches, "
        "and full bfloat16 training (mixed_precision=false)",
        tuple(f"{role}.veomni" for role in ENGINE_ROLES),
        off={
            **{f"{role}.veomni.expert_parallel_size": 1 for role in ENGINE_ROLES},
            **{f"{role}.veomni.mixed_precision": True for role in ENGINE_ROLES},
            **{f"{role}.veomni.load_checkpoint_path": None for role in ENGINE_ROLES},
            **{f"{role}.veomni.enable_fsdp_offload": False for role in ENGINE_ROLES},
            **{f"{role}.veomni.full_determinism": False for role in ENGINE_ROLES},
            **{f"{role}.veomni.forward_only": False for role in ENGINE_ROLES},
            **{f"{role}.veomni.moe_load_balance_monitor_interval": 0 for role in ENGINE_ROLES},
        },
    ),
    MissingFeature(
        "VeOmni's learning-rate schedule other than rlcore's (its lr_min, lr_start and lr_decay_ratio at 0, 0 and 1 "
        "are rlcore's cosine schedule with min_lr_ratio=0)",
        tuple(f"{role}.optim.{key}" for role in TRAINED_ROLES for key in ("lr_min", "lr_start", "lr_decay_ratio")),
        off={
            **{f"{role}.optim.lr_min": 0.0 for role in TRAINED_ROLES},
            **{f"{role}.optim.lr_start": 0.0 for role in TRAINED_ROLES},
            **{f"{role}.optim.lr_decay_ratio": 1.0 for role in TRAINED_ROLES},
        },
    ),
    MissingFeature(
        "verl's MindSpeed engine settings that rlcore's Megatron engine (which trains model_engine=mindspeed here) "
        "has no equal for: MindSpeed-LLM's megatron-core arguments (mcore_kwargs: Ascend layer specs and kernels), "
        "its FSDP variant (fsdp_kwargs) and the other NPU-only switches",
        tuple(f"{role}.mindspeed" for role in ENGINE_ROLES),
    ),
    MissingFeature(
        "these FSDP options of verl (rlcore-plugin-fsdp does not have them)",
        (
            *(
                f"{role}.fsdp_config.{name}"
                for role in ("actor_rollout_ref.*", "critic", "reward_model")
                for name in (
                    "wrap_policy",
                    "use_orig_params",
                    "seed",
                    "forward_only",
                    "strategy",
                )
            ),
            "critic.fsdp_config.use_torch_compile",
            "critic.fsdp_config.entropy_from_logits_with_chunking",
            "critic.fsdp_config.entropy_from_logits_chunk_size",
            "critic.fsdp_config.entropy_checkpointing",
        ),
        # FSDP1's flag; FSDP2 (fully_shard) always trains the original parameters. verl's engine strategy fsdp2 is
        # what rlcore-plugin-fsdp runs (verl's one-step-off scripts set it)
        off={
            **{
                f"{role}.fsdp_config.use_orig_params": True
                for role in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic", "reward_model")
            },
            **{
                f"{role}.fsdp_config.strategy": "fsdp2"
                for role in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic", "reward_model")
            },
        },
    ),
    MissingFeature(
        "a choice of optimizer (rlcore uses torch's AdamW)",
        (
            "actor_rollout_ref.actor.optim.optimizer",
            "actor_rollout_ref.actor.optim.optimizer_impl",
            "critic.optim.optimizer",
            "critic.optim.optimizer_impl",
        ),
        # verl's defaults: torch's AdamW, which is what rlcore steps
        off={
            **{f"{role}.optim.optimizer": "AdamW" for role in ("actor_rollout_ref.actor", "critic")},
            **{f"{role}.optim.optimizer_impl": "torch.optim" for role in ("actor_rollout_ref.actor", "critic")},
        },
    ),
    MissingFeature(
        "these model options of verl",
        (
            "actor_rollout_ref.model.hf_config_path",
            "actor_rollout_ref.model.external_lib",
            "actor_rollout_ref.model.tiled_mlp",
        ),
    ),
    MissingFeature(
        "not a key of verl's config either (verl's Hydra config rejects it; its FSDP workers load the weights "
        "in fsdp_config.model_dtype)",
        ("actor_rollout_ref.model.torch_dtype",),
        "set the backend's weight dtype instead: actor_rollout_ref.actor.fsdp_config.model_dtype=bf16",
    ),
    MissingFeature(
        "these critic options of verl",
        (
            "critic.model.external_lib",
            "critic.model.lora_rank",
            "critic.model.lora_alpha",
            "critic.model.target_modules",
            "critic.model.tiled_mlp",
            "critic.data_loader_seed",
            "critic.checkpoint.async_save",
        ),
    ),
    MissingFeature(
        "these actor options of verl",
        (
            "actor_rollout_ref.actor.calculate_entropy",
            "actor_rollout_ref.actor.sum_pi_squared_checkpointing",
        ),
    ),
    MissingFeature(
        "these rollout options of verl",
        (
            "actor_rollout_ref.rollout.pipeline_model_parallel_size",
            "actor_rollout_ref.rollout.logprobs_mode",
            "actor_rollout_ref.rollout.scheduling_policy",
            "actor_rollout_ref.rollout.skip_rollout",
            "actor_rollout_ref.rollout.skip_dump_dir",
            "actor_rollout_ref.rollout.quantization",
            "actor_rollout_ref.rollout.quantization_config_file",
            "actor_rollout_ref.rollout.prometheus",
            "actor_rollout_ref.rollout.engine_kwargs.trtllm",
        ),
        off={"actor_rollout_ref.rollout.pipeline_model_parallel_size": 1},
    ),
    MissingFeature(
        "these data options of verl",
        (
            "data.tokenizer",
            "data.use_shm",
            "data.return_raw_input_ids",
            "data.return_full_prompt",
            "data.datagen",
        ),
    ),
    MissingFeature(
        "these trainer options of verl",
        (
            "trainer.esi_redundant_time",
            "trainer.default_hdfs_dir",
            "trainer.del_local_ckpt_after_load",
            "trainer.ray_wait_register_center_timeout",
        ),
    ),
    MissingFeature(
        "starting the serving engine's tokenizer (rollout.skip_tokenizer_init=false): rlcore's engines take and return "
        "token ids, so SGLang runs with skip_tokenizer_init=true and vLLM and hf detokenize nothing (verl's vLLM server "
        "ignores this key)",
        ("actor_rollout_ref.rollout.skip_tokenizer_init",),
        off={"actor_rollout_ref.rollout.skip_tokenizer_init": True},
    ),
    MissingFeature("verl's TransferQueue", ("transfer_queue",)),
    MissingFeature(
        "these options of verl's fully-async trainer (rlcore maps staleness_threshold, trigger_parameter_sync_step, "
        "require_batches and partial_rollout onto trainer.v1.separate_async)",
        ("async_training.use_trainer_do_validate",),
        "docs/async-training.md",
        off={"async_training.use_trainer_do_validate": False},
    ),
    # verl 0.10's additions to its default config
    MissingFeature(
        "verl's legacy trainer (trainer.use_v1=false; rlcore has one trainer, synchronous as verl's V1 trainer in "
        "its default trainer_mode=sync)",
        ("trainer.use_v1",),
        off={"trainer.use_v1": True},
    ),
    MissingFeature(
        "verl's V1 hybrid rollout switch (trainer.v1.separate_async.hybrid_rollout: lending the trainer's ranks to "
        "the rollout lane between steps)",
        ("trainer.v1.separate_async.hybrid_rollout",),
        "docs/async-training.md",
        off={
            "trainer.v1.separate_async.hybrid_rollout.enable_switch": False,
        },
    ),
    MissingFeature(
        "verl's V1 custom samplers and the sync trainer's failed-group refill (rlcore's sync loop has no failed "
        "groups; the async modes refill filtered and stale groups one for one)",
        (
            "trainer.v1.sampler.custom_sampler",
            "trainer.v1.sampler.sampler_kwargs",
            "trainer.v1.sampler.sync_refill_failed_groups",
            "trainer.v1.sync",
        ),
        "docs/async-training.md",
        off={
            "trainer.v1.sampler.sync_refill_failed_groups": False,
            "trainer.v1.sampler.sampler_kwargs": {},
            "trainer.v1.sampler.custom_sampler.path": None,
            "trainer.v1.sampler.custom_sampler.name": None,
        },
    ),
    MissingFeature(
        "replaying dumped rollouts of verl's TransferQueue trainer and fully-async rollouter (rlcore: skip.rollout, "
        "the synchronous trainer's)",
        ("skip.rollout_tq", "skip.async_rollout"),
        off={f"skip.{name}.enable": False for name in ("rollout_tq", "async_rollout")},
    ),
    MissingFeature(
        "verl's standalone rollout server pool (rollout.nnodes > 0; rlcore: trainer.placement=split with "
        "trainer.rollout_n_gpus_per_node rollout ranks per node)",
        ("actor_rollout_ref.rollout.nnodes",),
        "docs/distributed.md",
        off={"actor_rollout_ref.rollout.nnodes": 0},
    ),
    MissingFeature(
        "prefill/decode disaggregated serving (rollout.disaggregation)",
        ("actor_rollout_ref.rollout.disaggregation", "reward_model.rollout.disaggregation"),
        off={
            "actor_rollout_ref.rollout.disaggregation.enabled": False,
            "reward_model.rollout.disaggregation.enabled": False,
        },
    ),
    MissingFeature(
        "batch-invariant deterministic inference for the reward model's generation (rlcore's judge decodes greedily; "
        "the policy's is actor_rollout_ref.rollout.full_determinism)",
        ("reward_model.rollout.full_determinism",),
        off={"reward_model.rollout.full_determinism": False},
    ),
    MissingFeature(
        "the reward model's generation server: its sampling settings and these engine options (rlcore's judge "
        "decodes greedily, one verdict per response)",
        tuple(
            f"reward_model.rollout.{key}"
            for key in (
                "temperature",
                "top_k",
                "top_p",
                "do_sample",
                "n",
                "seed",
                "ignore_eos",
                "pipeline_model_parallel_size",
                "layered_summon",
                "scheduling_policy",
                "multi_stage_wake_up",
                "quantization",
                "quantization_config_file",
            )
        ),
        off={
            "reward_model.rollout.do_sample": False,
            "reward_model.rollout.n": 1,
            "reward_model.rollout.ignore_eos": False,
            "reward_model.rollout.pipeline_model_parallel_size": 1,
            "reward_model.rollout.layered_summon": False,
            "reward_model.rollout.multi_stage_wake_up": False,
            "reward_model.rollout.quantization": None,
            "reward_model.rollout.quantization_config_file": None,
        },
    ),
    MissingFeature(
        "MoE load-balance metrics from the rollout engine (rollout.moe_load_balance_metrics_interval)",
        ("actor_rollout_ref.rollout.moe_load_balance_metrics_interval",),
        off={"actor_rollout_ref.rollout.moe_load_balance_metrics_interval": 0},
    ),
    MissingFeature(
        "quantization-aware training (qat.enable: NVFP4 fake-quantized weights, synced quantized to vLLM)",
        (
            "actor_rollout_ref.actor.qat",
            "actor_rollout_ref.*.fsdp_config.qat",
            "critic.fsdp_config.qat",
            "actor_rollout_ref.rollout.qat",
        ),
        off={
            "actor_rollout_ref.actor.qat.enable": False,
            "actor_rollout_ref.actor.fsdp_config.qat.enable": False,
            "actor_rollout_ref.ref.fsdp_config.qat.enable": False,
            "critic.fsdp_config.qat.enable": False,
            "actor_rollout_ref.rollout.qat": None,
        },
    ),
    MissingFeature(
        "verl's FSDP-Turbo settings that rlcore's FSDP engine (which trains strategy=fsdp_turbo here) has no equal "
        "for: tensor and expert parallelism (tensor_parallel_size, expert_parallel_size and "
        "expert_fully_shard_parallel_size > 1, ep_plan), its context-parallel and module patches (cp_plan, "
        "module_patches), its FSDP plan's output_dtype and CPU offload (rlcore's is fsdp_config.offload_policy)",
        tuple(f"{role}.fsdp_config.turbo_config" for role in ENGINE_ROLES),
        off={
            f"{role}.fsdp_config.turbo_config.distributed.{key}": 1
            for role in ENGINE_ROLES
            for key in ("tensor_parallel_size", "expert_parallel_size", "expert_fully_shard_parallel_size")
        },
    ),
    MissingFeature(
        "a one-indexed learning-rate schedule (optim.zero_indexed_step=false; rlcore's schedule counts from step 0)",
        ("actor_rollout_ref.actor.optim.zero_indexed_step", "critic.optim.zero_indexed_step"),
        off={"actor_rollout_ref.actor.optim.zero_indexed_step": True, "critic.optim.zero_indexed_step": True},
    ),
    MissingFeature(
        "the DRO policy loss (policy_loss.loss_mode=dro and its dro_beta)",
        ("actor_rollout_ref.actor.policy_loss.dro_beta",),
        off={"actor_rollout_ref.actor.policy_loss.dro_beta": None},
    ),
    MissingFeature(
        "several dynamic-sampling generation rounds in flight at once (filter_groups.max_inflight_gen_batches; "
        "rlcore generates one round at a time)",
        ("algorithm.filter_groups.max_inflight_gen_batches",),
        off={"algorithm.filter_groups.max_inflight_gen_batches": 1},
    ),
    MissingFeature(
        "tools defined as Python functions (multi_turn.function_tool_path; rlcore: tool classes in "
        "multi_turn.tool_config_path)",
        ("actor_rollout_ref.rollout.multi_turn.function_tool_path", "data.function_tool_path"),
        off={"actor_rollout_ref.rollout.multi_turn.function_tool_path": None, "data.function_tool_path": None},
    ),
    MissingFeature(
        "audio input and extra multimodal processor arguments (data.audio_key, data.mm_processor_kwargs)",
        ("data.audio_key", "data.mm_processor_kwargs"),
        off={"data.audio_key": "audios", "data.mm_processor_kwargs": {}},
    ),
    MissingFeature(
        "these model options of verl on the critic (its kernel switches, LoRA adapter, chat template and "
        "hf_config_path; rlcore's critic.model has verl's other model options)",
        tuple(
            f"critic.model.{key}"
            for key in (
                "hf_config_path",
                "custom_chat_template",
                "exclude_modules",
                "lora_adapter_path",
                "use_liger",
                "use_fused_kernels",
                "fused_kernel_options",
            )
        ),
        off={
            "critic.model.hf_config_path": None,
            "critic.model.custom_chat_template": None,
            "critic.model.exclude_modules": None,
            "critic.model.lora_adapter_path": None,
            "critic.model.use_liger": False,
            "critic.model.use_fused_kernels": False,
        },
    ),
    MissingFeature(
        "msprobe's precision debugger (global_profiler.tool=precision_debugger, Ascend)",
        ("global_profiler.global_tool_config.precision_debugger",),
        "docs/profiling.md",
    ),
    MissingFeature(
        "per-role result relocation and finish hooks of the profiler (every role takes global_profiler's, as verl's "
        "defaults make it)",
        tuple(f"{role}.profiler.{name}" for role in PROFILED_ROLES for name in _PROFILER_HOOK_OFF),
        "docs/profiling.md",
        off={f"{role}.profiler.{name}": value for role in PROFILED_ROLES for name, value in _PROFILER_HOOK_OFF.items()},
    ),
    MissingFeature(
        "a serving engine for distillation teachers (rlcore-plugin-distill scores them with the training backend's "
        "forward at temperature 1)",
        tuple(f"distillation.teacher_models.*.inference.{name}" for name in TEACHER_SERVING_KEYS),
        off={"distillation.teacher_models.teacher_model.inference.temperature": 1.0},
    ),
    MissingFeature(
        "verl v0.9's continuous-token prompts (data.continuous_token: a model family's own encoder builds the token ids "
        "of the prompt and of later turns, DeepSeek-V4's; rlcore renders prompts with the tokenizer's chat template)",
        ("data.continuous_token",),
        off={"data.continuous_token.enable": False},
    ),
)

#: values rlcore's keys accept but cannot honour yet: key -> (is the value unsupported?, feature)
UNSUPPORTED_VALUES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "actor_rollout_ref.actor.checkpoint.async_save": (lambda v: v is True, "asynchronous checkpoint saving"),
}


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def missing_feature(key: str) -> MissingFeature | None:
    """The verl feature rlcore lacks that ``key`` configures, if it is one."""
    return next((f for f in MISSING_FEATURES if f.matches(key)), None)


def missing_feature_problems(
    unknown: Mapping[str, Any], source: str, given: Mapping[str, str], *, megatron_installed: bool = False
) -> tuple[list[str], list[str]]:
    """Split the ``unknown`` keys (with their values) into one problem per missing feature, and the keys no
    feature accounts for. Keys set to the value that turns their feature off are neither.

    ``given`` maps a renamed key to the spelling the user wrote, which the messages use. With
    ``megatron_installed`` the Megatron features do not tell the user to install the plugin.
    """
    grouped: dict[MissingFeature, list[str]] = {}
    rest = []
    for key, value in unknown.items():
        feature = missing_feature(key)
        if feature is None:
            rest.append(key)
        elif key not in feature.off or not _same(feature.off[key], value):
            grouped.setdefault(feature, []).append(given.get(key, key))
    problems = []
    for feature, names in grouped.items():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        hint = MEGATRON_INSTALLED_HINT if megatron_installed and feature.hint == MEGATRON_HINT else feature.hint
        problems.append(f"{source}: {shown}: {feature.feature}: {hint}")
    return problems, rest


def unsupported_value_problems(config: DictConfig) -> list[str]:
    """Problems for keys set to a value that asks for a feature rlcore lacks (``algorithm.use_pf_ppo=true``)."""
    from omegaconf import OmegaConf

    problems = []
    for key, (unsupported, feature) in UNSUPPORTED_VALUES.items():
        value = OmegaConf.select(config, key, default=None)
        if unsupported(value):
            problems.append(f"{key}={value!r} asks for {feature}: {NOT_YET}")
    return problems
