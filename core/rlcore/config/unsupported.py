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
        return any(_prefix_match(pattern.split("."), parts) for pattern in self.patterns)


def _prefix_match(pattern: list[str], parts: list[str]) -> bool:
    return len(parts) >= len(pattern) and all(p in ("*", k) for p, k in zip(pattern, parts))


ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "actor_rollout_ref.rollout", "critic", "reward_model")

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
            "actor_rollout_ref.actor.optim.lr_decay_style",
            "actor_rollout_ref.actor.optim.lr_decay_steps",
            "actor_rollout_ref.actor.optim.min_lr",
            "actor_rollout_ref.actor.optim.lr_warmup_init",
            "actor_rollout_ref.model.lora",
            "critic.model.lora",
        ),
        MEGATRON_HINT,
    ),
    MissingFeature(
        "Nsight/NPU profiling options and verl's older profiler keys (rlcore profiles with global_profiler.tool=torch, "
        "torch_memory or nsys, whose NVTX ranges need the run launched under nsys)",
        (
            "global_profiler.global_tool_config.nsys",
            "global_profiler.global_tool_config.npu",
            *(f"{role}.profiler.{key}" for role in ROLES for key in ("tool", "save_path")),
            *(
                f"{role}.profiler.tool_config.{tool}"
                for role in ROLES
                if role != "reward_model"
                for tool in ("nsys", "npu", "torch_memory", "precision_debugger")
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
        "video input and these multimodal data options of verl (rlcore: images through the model's processor)",
        (
            "data.video_key",
            "data.image_patch_size",
            "data.return_multi_modal_inputs",
        ),
        off={
            "data.video_key": "videos",
            "data.image_patch_size": None,
            "data.return_multi_modal_inputs": True,
        },
    ),
    MissingFeature(
        "these reward-model options of verl (sequence parallelism, reward-loop classes, its generation engine's settings)",
        (
            "reward_model.model.external_lib",
            "reward_model.ulysses_sequence_parallel_size",
            "reward_model.reward_loop_source",
            "reward_model.reward_loop_module_path",
            "reward_model.reward_loop_class_name",
            *(
                f"reward_model.rollout.{key}"
                for key in (
                    "dtype",
                    "enforce_eager",
                    "cudagraph_capture_sizes",
                    "free_cache_engine",
                    "data_parallel_size",
                    "expert_parallel_size",
                    "max_num_batched_tokens",
                    "max_model_len",
                    "max_num_seqs",
                    "load_format",
                    "engine_kwargs",
                    "limit_images",
                    "enable_chunked_prefill",
                    "enable_prefix_caching",
                    "disable_log_stats",
                    "skip_tokenizer_init",
                )
            ),
        ),
        off={"reward_model.reward_loop_source": "register"},
    ),
    MissingFeature(
        "sandboxed code-execution rewards (Sandbox Fusion)",
        ("reward_model.sandbox_fusion", "reward.sandbox_fusion", "sandbox_fusion"),
        "rlcore runs code rewards in its own sandbox instead: data_source codecontests, apps, codeforces or taco "
        "(docs/rewards.md)",
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
    MissingFeature("multi-token prediction (MTP)", ("actor_rollout_ref.model.mtp", "actor_rollout_ref.rollout.mtp")),
    MissingFeature(
        "verl's Megatron-Lite engine (actor@actor_rollout_ref.actor=mlite_actor)",
        ("actor_rollout_ref.actor.engine", "actor_rollout_ref.ref.engine", "critic.engine"),
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
                    "full_determinism",
                    "forward_only",
                    "strategy",
                    "mixed_precision",
                )
            ),
            "critic.fsdp_config.use_torch_compile",
            "critic.fsdp_config.entropy_from_logits_with_chunking",
            "critic.fsdp_config.entropy_checkpointing",
        ),
    ),
    MissingFeature(
        "a choice of optimizer (rlcore uses torch's AdamW)",
        (
            "actor_rollout_ref.actor.optim.optimizer",
            "actor_rollout_ref.actor.optim.optimizer_impl",
            "critic.optim.optimizer",
            "critic.optim.optimizer_impl",
        ),
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
            "actor_rollout_ref.actor.use_prefix_grouper",
            "actor_rollout_ref.actor.sum_pi_squared_checkpointing",
        ),
    ),
    MissingFeature(
        "these rollout options of verl",
        (
            "actor_rollout_ref.rollout.cudagraph_capture_sizes",
            "actor_rollout_ref.rollout.expert_parallel_size",
            "actor_rollout_ref.rollout.pipeline_model_parallel_size",
            "actor_rollout_ref.rollout.logprobs_mode",
            "actor_rollout_ref.rollout.scheduling_policy",
            "actor_rollout_ref.rollout.disable_log_stats",
            "actor_rollout_ref.rollout.skip_rollout",
            "actor_rollout_ref.rollout.skip_dump_dir",
            "actor_rollout_ref.rollout.skip_tokenizer_init",
            "actor_rollout_ref.rollout.quantization",
            "actor_rollout_ref.rollout.quantization_config_file",
            "actor_rollout_ref.rollout.prometheus",
            "actor_rollout_ref.rollout.engine_kwargs.trtllm",
        ),
        off={
            "actor_rollout_ref.rollout.expert_parallel_size": 1,
            "actor_rollout_ref.rollout.pipeline_model_parallel_size": 1,
        },
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
        "the REINFORCE loss of rollout correction's bypass mode",
        ("algorithm.rollout_correction.loss_type",),
        off={"algorithm.rollout_correction.loss_type": "ppo_clip"},
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
    MissingFeature("verl's TransferQueue", ("transfer_queue",)),
    MissingFeature(
        "verl's fully-async trainer (rlcore: one-step-off-policy, async_training.enable and max_staleness_steps)",
        tuple(
            f"async_training.{key}"
            for key in (
                "staleness_threshold",
                "trigger_parameter_sync_step",
                "require_batches",
                "partial_rollout",
                "use_trainer_do_validate",
            )
        ),
        "docs/async-training.md",
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
