"""Checks that need more than one key, and the derived quantities printed before a run starts.

Everything here runs before any worker, model or dataset is created, so a bad batch size costs the user
seconds, not a queue slot.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from omegaconf import DictConfig

from rlcore.config.loader import ConfigError
from rlcore.errors import RLCoreError
from rlcore.workers.batch_sizes import ppo_batch_sizes

TRUNCATION_MODES = ("left", "right", "middle", "error")


@dataclass
class DerivedQuantities:
    """Batch arithmetic of one run, as verl computes it inside its workers."""

    world_size: int
    data_parallel_size: int
    n: int
    prompts_per_step: int
    responses_per_step: int
    mini_batch_prompts: int
    mini_batches_per_epoch: int
    responses_per_mini_batch_per_rank: int
    micro_batch_per_rank: int
    grad_accumulation_steps: int
    ppo_epochs: int
    optimizer_steps_per_step: int
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (saved as ``derived.json`` in the run directory)."""
        return asdict(self)

    def summary(self) -> str:
        """Human-readable lines printed at the start of a run."""
        lines = [
            f"prompts per step: {self.prompts_per_step} x n={self.n} -> {self.responses_per_step} responses",
            f"data-parallel ranks: {self.data_parallel_size} (of {self.world_size} ranks)",
            f"mini-batches per step: {self.mini_batches_per_epoch} x {self.ppo_epochs} epoch(s) "
            f"= {self.optimizer_steps_per_step} optimizer steps "
            f"({self.mini_batch_prompts} prompts = {self.responses_per_mini_batch_per_rank} responses per rank each)",
            f"micro-batch per rank: {self.micro_batch_per_rank} -> {self.grad_accumulation_steps} grad-accumulation steps",
        ]
        return "\n".join(lines + [f"note: {n}" for n in self.notes])


def _positive(config: DictConfig, key: str) -> int:
    from omegaconf import OmegaConf

    value = OmegaConf.select(config, key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{key} must be a positive integer, got {value!r}")
    return value


def _check_rollout_correction(config: DictConfig) -> None:
    """``algorithm.rollout_correction.rollout_is`` is a known level and has the rollout log-probs it needs."""
    from rlcore.algos.rollout_correction import IS_LEVELS

    correction = config.algorithm.get("rollout_correction") or {}
    level = correction.get("rollout_is")
    if level is None:
        return
    if level not in IS_LEVELS:
        raise ConfigError(
            f"algorithm.rollout_correction.rollout_is must be one of {', '.join(IS_LEVELS)} or null, got {level!r}"
        )
    if not config.actor_rollout_ref.rollout.get("calculate_log_probs", False):
        raise ConfigError(
            "algorithm.rollout_correction.rollout_is needs the engine's log-probs: "
            "set actor_rollout_ref.rollout.calculate_log_probs=true"
        )
    threshold = correction.get("rollout_is_threshold")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not threshold > 0:
        raise ConfigError(f"algorithm.rollout_correction.rollout_is_threshold must be a number > 0, got {threshold!r}")


def _data_parallel_size(config: DictConfig, world: int) -> int:
    """The actor's data-parallel size over ``world`` ranks, as its training backend derives it (``world`` when
    the backend is unknown: that is reported by the component check)."""
    from rlcore.registry import UnknownComponentError
    from rlcore.workers.engine import data_parallel_size

    try:
        return data_parallel_size(config, "actor_rollout_ref.actor", world)
    except UnknownComponentError:
        return world
    except RLCoreError as exc:
        raise ConfigError(str(exc)) from exc


def derive_quantities(config: DictConfig) -> DerivedQuantities:
    """Validate cross-key constraints and return the derived batch quantities.

    verl semantics: ``ppo_mini_batch_size`` counts prompts (times ``rollout.n`` responses) and is divided
    across data-parallel ranks; ``ppo_micro_batch_size_per_gpu`` counts responses on one rank. The per-rank
    sizes come from :func:`rlcore.workers.batch_sizes.ppo_batch_sizes`, the function the workers use, over
    the data-parallel size the training backend reports (world ÷ model-parallel size).
    """
    n = _positive(config, "actor_rollout_ref.rollout.n")
    prompts = _positive(config, "data.train_batch_size")
    mini = _positive(config, "actor_rollout_ref.actor.ppo_mini_batch_size")
    epochs = _positive(config, "actor_rollout_ref.actor.ppo_epochs")
    world = _positive(config, "trainer.nnodes") * _positive(config, "trainer.n_gpus_per_node")
    notes: list[str] = []

    if config.trainer.executor == "local" and world > 1:
        raise ConfigError(
            f"trainer.executor=local runs a single process, but trainer.nnodes x trainer.n_gpus_per_node = {world} "
            f"ranks were asked for; set trainer.executor=ray (or auto)"
        )
    if config.trainer.executor not in ("local", "ray"):
        raise ConfigError(f"trainer.executor must be 'auto', 'local' or 'ray', got {config.trainer.executor!r}")
    if config.data.truncation not in TRUNCATION_MODES:
        raise ConfigError(f"data.truncation must be one of {', '.join(TRUNCATION_MODES)}, got {config.data.truncation!r}")
    _positive(config, "data.max_prompt_length")
    _positive(config, "data.max_response_length")
    _check_rollout_correction(config)
    if mini > prompts:
        raise ConfigError(
            f"actor_rollout_ref.actor.ppo_mini_batch_size ({mini}) must not exceed data.train_batch_size ({prompts})"
        )
    dp = _data_parallel_size(config, world)
    if (prompts * n) % dp:
        raise ConfigError(
            f"data.train_batch_size x rollout.n = {prompts * n} responses cannot be split evenly over "
            f"{dp} data-parallel ranks ({world} ranks: trainer.nnodes x trainer.n_gpus_per_node)"
        )
    try:
        sizes = ppo_batch_sizes(config, "actor_rollout_ref.actor", dp)
    except RLCoreError as exc:
        raise ConfigError(str(exc)) from exc
    per_rank = sizes.mini
    micro = sizes.micro
    if config.actor_rollout_ref.actor.use_dynamic_bsz:
        micro = per_rank
        notes.append("use_dynamic_bsz: micro-batches are formed by ppo_max_token_len_per_gpu")
    elif sizes.micro_from_default:
        notes.append(
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu is not set: using the whole "
            f"mini-batch ({per_rank} responses per rank, no gradient accumulation)"
        )
    minis = -(-prompts // mini)
    if prompts % mini:
        notes.append(
            f"data.train_batch_size ({prompts}) is not a multiple of ppo_mini_batch_size ({mini}): "
            f"the last mini-batch holds {prompts % mini} prompts"
        )
    return DerivedQuantities(
        world_size=world,
        data_parallel_size=dp,
        n=n,
        prompts_per_step=prompts,
        responses_per_step=prompts * n,
        mini_batch_prompts=mini,
        mini_batches_per_epoch=minis,
        responses_per_mini_batch_per_rank=per_rank,
        micro_batch_per_rank=micro,
        grad_accumulation_steps=per_rank // micro,
        ppo_epochs=epochs,
        optimizer_steps_per_step=minis * epochs,
        notes=notes,
    )
