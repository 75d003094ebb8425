"""The ``rlcore sft`` config: verl's SFT key tree, its validation, and the engine config it is lowered to.

:func:`load_sft_config` merges ``defaults.yaml`` (verl's ``sft_trainer.yaml`` names), YAML files and
``key=value`` overrides, with the same rules as ``rlcore run``: an unknown key is an error naming the
closest known key, a value of the wrong type is an error naming the key, and every problem is reported at
once. A verl key that rlcore cannot honour is accepted only at the value that asks for nothing
(:data:`UNSUPPORTED`).

The training engines read the RL key tree (:mod:`rlcore.api.training`): :func:`engine_config` lowers
an SFT config onto rlcore's RL defaults (``actor_rollout_ref.model.*``, ``actor_rollout_ref.actor.*``,
``trainer.*``), so SFT runs on exactly the engines, workers and checkpoints that RL uses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import yaml
from omegaconf import DictConfig, OmegaConf

from rlcore.api import (
    ConfigError,
    ConfigSource,
    Problems,
    default_config,
    legacy_per_rank,
    load_config_tree,
    positive_int,
    select,
    to_plain,
)

if TYPE_CHECKING:
    from rlcore.api import RunKit

DEFAULTS_FILE = Path(__file__).with_name("defaults.yaml")
#: verl's older spellings -> the key of ``defaults.yaml``
ALIASES: dict[str, str] = {"optim.warmup_steps_ratio": "optim.lr_warmup_steps_ratio"}
#: verl keys rlcore cannot honour: key -> (the only accepted value, what to do instead)
UNSUPPORTED: dict[str, tuple[Any, str]] = {
    "data.balance_dp_token": (False, "token balancing across ranks is not supported; use data.use_dynamic_bsz"),
    "data.custom_cls.path": (None, "a custom SFT dataset class is not supported; convert the data to parquet/jsonl"),
    "data.use_shm": (False, "loading data through shared memory is not supported"),
    "model.use_shm": (False, "loading the model through shared memory is not supported"),
    "model.use_liger": (False, "Liger kernels are not supported"),
    "model.fsdp_config.wrap_policy.min_num_params": (0, "rlcore wraps every decoder layer; leave it at 0"),
    "trainer.default_hdfs_dir": (None, "copying checkpoints to HDFS is not supported; copy global_step_N yourself"),
}
LR_SCHEDULERS: tuple[str, ...] = ("cosine", "constant")
TRUNCATIONS: tuple[str, ...] = ("error", "left", "right")
#: the actor section the engine reads
ACTOR = "actor_rollout_ref.actor"
#: engine (RL-tree) key -> the SFT key it is set from
LOWERED: dict[str, str] = {
    "actor_rollout_ref.model.path": "model.partial_pretrain",
    "actor_rollout_ref.model.trust_remote_code": "model.trust_remote_code",
    "actor_rollout_ref.model.enable_gradient_checkpointing": "model.enable_gradient_checkpointing",
    "actor_rollout_ref.model.use_remove_padding": "use_remove_padding",
    "actor_rollout_ref.model.lora_rank": "model.lora_rank",
    "actor_rollout_ref.model.lora_alpha": "model.lora_alpha",
    "actor_rollout_ref.model.target_modules": "model.target_modules",
    "actor_rollout_ref.model.custom_chat_template": "data.chat_template",
    f"{ACTOR}.strategy": "model.strategy",
    f"{ACTOR}.ppo_mini_batch_size": "data.train_batch_size",
    f"{ACTOR}.use_dynamic_bsz": "data.use_dynamic_bsz",
    f"{ACTOR}.ppo_max_token_len_per_gpu": "data.max_token_len_per_gpu",
    f"{ACTOR}.ulysses_sequence_parallel_size": "ulysses_sequence_parallel_size",
    f"{ACTOR}.grad_clip": "optim.clip_grad",
    f"{ACTOR}.optim.clip_grad": "optim.clip_grad",
    f"{ACTOR}.optim.lr": "optim.lr",
    f"{ACTOR}.optim.betas": "optim.betas",
    f"{ACTOR}.optim.weight_decay": "optim.weight_decay",
    f"{ACTOR}.optim.lr_warmup_steps_ratio": "optim.lr_warmup_steps_ratio",
    f"{ACTOR}.optim.lr_warmup_steps": "optim.lr_warmup_steps",
    f"{ACTOR}.optim.lr_scheduler_type": "optim.lr_scheduler",
    f"{ACTOR}.optim.min_lr_ratio": "optim.min_lr_ratio",
    f"{ACTOR}.optim.num_cycles": "optim.num_cycles",
    f"{ACTOR}.checkpoint.save_contents": "trainer.checkpoint.save_contents",
    f"{ACTOR}.checkpoint.load_contents": "trainer.checkpoint.load_contents",
    "trainer.max_actor_ckpt_to_keep": "trainer.max_ckpt_to_keep",
    **{
        f"trainer.{key}": f"trainer.{key}"
        for key in (
            "device",
            "seed",
            "nnodes",
            "n_gpus_per_node",
            "executor",
            "default_local_dir",
            "resume_mode",
            "resume_from_path",
            "resume_allow_changes",
            "project_name",
            "experiment_name",
        )
    },
}
#: the FSDP engine's keys (when the FSDP backend is installed) -> the SFT key
LOWERED_FSDP: dict[str, str] = {
    f"{ACTOR}.fsdp_config.model_dtype": "model.fsdp_config.model_dtype",
    f"{ACTOR}.fsdp_config.param_offload": "model.fsdp_config.offload_params",
    f"{ACTOR}.fsdp_config.offload_policy": "model.fsdp_config.cpu_offload",
}
#: engine settings every SFT run has: one sequence per "prompt", one pass, token-mean, no shuffling
FIXED: dict[str, Any] = {
    "actor_rollout_ref.rollout.n": 1,
    f"{ACTOR}.ppo_epochs": 1,
    f"{ACTOR}.shuffle": False,
    f"{ACTOR}.loss_agg_mode": "token-mean",
}


def sft_key_names(message: str) -> str:
    """``message`` (an engine's or the model check's error) with engine keys replaced by the SFT keys they
    come from, so that errors name what the user set."""
    for key in sorted({**LOWERED, **LOWERED_FSDP}, key=len, reverse=True):
        message = message.replace(key, {**LOWERED, **LOWERED_FSDP}[key])
    return message


def sft_defaults() -> DictConfig:
    """The SFT defaults (unresolved interpolations kept)."""
    with DEFAULTS_FILE.open() as handle:
        return OmegaConf.create(yaml.safe_load(handle))


def check_sft_values(config: DictConfig) -> list[str]:
    """Problems with values of an SFT config: unsupported verl features and closed choices."""
    problems = []
    for key, (allowed, instead) in UNSUPPORTED.items():
        value = OmegaConf.select(config, key, default=None)
        if value != allowed and not (allowed is None and value in (None, "")):
            problems.append(f"{key}={value!r}: {instead}")
    choices = {"data.truncation": TRUNCATIONS, "optim.lr_scheduler": LR_SCHEDULERS}
    for key, allowed_values in choices.items():
        value = OmegaConf.select(config, key, default=None)
        if value not in allowed_values:
            problems.append(f"{key}={value!r} must be one of {', '.join(allowed_values)}")
    if bool(config.data.multiturn.enable) is False and not (config.data.prompt_key and config.data.response_key):
        problems.append("data.prompt_key and data.response_key must name columns (or set data.multiturn.enable=true)")
    return problems


def load_sft_config(
    files: Iterable[str] = (),
    overrides: Iterable[str] = (),
    problems: Problems | None = None,
    base: ConfigSource | None = None,
) -> DictConfig:
    """The resolved SFT config from the defaults, ``base`` (the bundled task's settings), ``files`` and
    ``key=value`` ``overrides`` (later wins), loaded with ``rlcore run``'s rules (:func:`rlcore.api.load_config_tree`).

    Every bad key or value is a problem naming it; they are raised together as one :class:`ConfigError`,
    or recorded in ``problems`` when given (the config then holds the valid keys only).
    """
    collected = problems if problems is not None else Problems()
    merged = load_config_tree(
        sft_defaults(),
        files,
        overrides,
        problems=collected,
        base=base,
        aliases=ALIASES,
        unknown="unknown SFT config key",
        listing="`rlcore sft --dry-run` prints every key",
    )
    for message in check_sft_values(merged):
        collected.add(message)
    if problems is None:
        collected.raise_if_any()
    return merged


def world_size(config: DictConfig) -> int:
    """The number of ranks: ``trainer.nnodes × trainer.n_gpus_per_node``."""
    return positive_int(config.trainer.nnodes, "trainer.nnodes") * positive_int(
        config.trainer.n_gpus_per_node, "trainer.n_gpus_per_node"
    )


def lower_config(config: DictConfig, kit: RunKit | None = None) -> tuple[DictConfig, SFTBatchSizes]:
    """The engine config (:func:`engine_config`) and the step's batch sizes, which it carries: the
    per-rank micro-batch (the whole per-rank batch with a token budget)."""
    from rlcore.api import data_parallel_size

    lowered = engine_config(config, kit)
    sizes = sft_batch_sizes(config, data_parallel_size(lowered, ACTOR, world_size(config)))
    lowered.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu = sizes.micro or sizes.per_rank
    return lowered, sizes


def engine_config(config: DictConfig, kit: RunKit | None = None) -> DictConfig:
    """The RL-tree config that rlcore's workers and training engines read for this SFT run (without the
    micro-batch size, which :func:`lower_config` adds).

    It is rlcore's RL defaults (with every plugin's sections) with the SFT settings placed where the engine
    looks: the model under ``actor_rollout_ref.model``, the optimizer, schedule, batch sizes, strategy and
    checkpoint contents under ``actor_rollout_ref.actor``, the run settings under ``trainer``. One sequence
    is one "response" (``rollout.n=1``) and one step is one mini-batch of ``data.train_batch_size``.
    """
    settings: dict[str, Any] = {key: OmegaConf.select(config, source) for key, source in LOWERED.items()}
    settings.update(FIXED)
    base = default_config(kit.manager if kit is not None else None)
    if OmegaConf.select(base, f"{ACTOR}.fsdp_config") is not None:
        settings.update({key: OmegaConf.select(config, source) for key, source in LOWERED_FSDP.items()})
    lowered = OmegaConf.create()
    for key, value in settings.items():
        OmegaConf.update(lowered, key, to_plain(value))
    merged = cast(DictConfig, OmegaConf.merge(base, lowered))
    OmegaConf.resolve(merged)
    return merged


@dataclass(frozen=True)
class SFTBatchSizes:
    """One step's batch arithmetic.

    Attributes:
        dp_size: data-parallel ranks.
        per_rank: sequences per step on one rank.
        micro: sequences per micro-batch on one rank (None with ``data.use_dynamic_bsz``).
    """

    dp_size: int
    per_rank: int
    micro: int | None

    def summary(self, train_batch_size: int) -> str:
        """One line for the console."""
        micro = "token budget" if self.micro is None else f"{self.micro} per micro-batch"
        accumulation = "" if self.micro is None else f", {self.per_rank // self.micro} accumulation steps"
        return (
            f"sequences per step: {train_batch_size} = {self.dp_size} data-parallel rank(s) x {self.per_rank} "
            f"({micro}{accumulation})"
        )


def sft_batch_sizes(config: DictConfig, dp_size: int) -> SFTBatchSizes:
    """The per-rank sizes of a step over ``dp_size`` data-parallel ranks; errors name the SFT keys."""
    total = positive_int(select(config, "data.train_batch_size"), "data.train_batch_size")
    if total % dp_size:
        raise ConfigError(
            f"data.train_batch_size ({total}) must be divisible by the number of data-parallel ranks ({dp_size})"
        )
    per_rank = total // dp_size
    if bool(config.data.use_dynamic_bsz):
        positive_int(select(config, "data.max_token_len_per_gpu"), "data.max_token_len_per_gpu")
        return SFTBatchSizes(dp_size, per_rank, None)
    if select(config, "data.micro_batch_size") is not None:
        micro = legacy_per_rank(config, "data.micro_batch_size", "data.micro_batch_size_per_gpu", dp_size)
    else:
        micro = positive_int(select(config, "data.micro_batch_size_per_gpu"), "data.micro_batch_size_per_gpu")
    if per_rank % micro:
        raise ConfigError(
            f"the per-rank batch (data.train_batch_size {total} / {dp_size} rank(s) = {per_rank}) must be "
            f"divisible by data.micro_batch_size_per_gpu ({micro})"
        )
    return SFTBatchSizes(dp_size, per_rank, micro)
