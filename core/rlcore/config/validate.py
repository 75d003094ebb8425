"""Checks that need more than one key, and the derived quantities printed before a run starts.

Everything here runs before any worker, model or dataset is created, so a bad batch size costs the user
seconds, not a queue slot.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from omegaconf import DictConfig

from rlcore.config.async_training import async_training_problems
from rlcore.config.keys import positive_key
from rlcore.config.loader import ConfigError
from rlcore.errors import RLCoreError
from rlcore.workers.activation_offload import activation_offload_notes
from rlcore.workers.batch_sizes import ppo_batch_sizes, ulysses_size

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
    sequence_parallel_size: int = 1

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (saved as ``derived.json`` in the run directory)."""
        return asdict(self)

    def summary(self) -> str:
        """Human-readable lines printed at the start of a run."""
        lines = [
            f"prompts per step: {self.prompts_per_step} x n={self.n} -> {self.responses_per_step} responses",
            f"data-parallel ranks: {self.data_parallel_size} (of {self.world_size} ranks"
            + (
                f"; world / ulysses_sequence_parallel_size {self.sequence_parallel_size}: "
                f"{self.sequence_parallel_size} ranks split each sequence)"
                if self.sequence_parallel_size > 1
                else ")"
            ),
            f"mini-batches per step: {self.mini_batches_per_epoch} x {self.ppo_epochs} epoch(s) "
            f"= {self.optimizer_steps_per_step} optimizer steps "
            f"({self.mini_batch_prompts} prompts = {self.responses_per_mini_batch_per_rank} responses per rank each)",
            f"micro-batch per rank: {self.micro_batch_per_rank} -> {self.grad_accumulation_steps} grad-accumulation steps",
        ]
        return "\n".join(lines + [f"note: {n}" for n in self.notes])


#: counts that must be positive integers, or null where null has a meaning (``trainer.total_training_steps``:
#: derived from the epochs; ``data.gen_batch_size``: ``data.train_batch_size``; ...)
POSITIVE_KEYS: tuple[str, ...] = (
    "actor_rollout_ref.rollout.response_length",
    "actor_rollout_ref.rollout.prompt_length",
    "actor_rollout_ref.rollout.val_kwargs.n",
    "trainer.total_epochs",
    "trainer.max_nonfinite_steps",
    "reward_model.scorer_workers",
)
NULL_OR_POSITIVE_KEYS: tuple[str, ...] = (
    "trainer.total_training_steps",
    "data.gen_batch_size",
    "data.val_batch_size",
)
#: counts where 0 is meaningful but a negative value is not
NON_NEGATIVE_KEYS: tuple[str, ...] = (
    "trainer.log_val_generations",
    "reward_model.num_examine",
    "reward_model.scorer_output_bytes",
)
#: durations in seconds: 0 or null switch the limit off, a negative value is an error
NON_NEGATIVE_SECONDS: tuple[str, ...] = (
    "reward_model.scorer_timeout",
    "reward_model.scorer_batch_timeout",
    "trainer.stop_grace_s",
)
#: keys accepted for verl's sake that rlcore honours only at one value: key -> (allowed values, why)
ONLY_VALUES: dict[str, tuple[tuple[Any, ...], str]] = {
    "actor_rollout_ref.hybrid_engine": (
        (True,),
        (
            "rlcore (like verl) always runs the hybrid engine; for rollout on ranks of its own set "
            "trainer.placement=split"
        ),
    ),
    "trainer.use_legacy_worker_impl": (
        ("auto", "disable"),
        (
            "rlcore has one worker implementation, the engine-based one (verl's new workers); "
            "verl's legacy workers are not available"
        ),
    ),
}


#: verl's speed settings that cannot change results and that rlcore does not need: key -> (rlcore's value, why);
#: another value is accepted (verl scripts set them) and named in a note of the run plan
SPEED_ONLY: dict[str, tuple[Any, str]] = {
    "actor_rollout_ref.actor.entropy_from_logits_with_chunking": (False, "the entropy is computed in one piece"),
    "actor_rollout_ref.actor.entropy_checkpointing": (False, "the entropy is not recomputed"),
    "data.dataloader_num_workers": (0, "prompts are tokenized once, when the dataset is read"),
    "actor_rollout_ref.rollout.multi_stage_wake_up": (
        False,
        "rlcore's engines load the weights and the KV cache in their own order (an SGLang memory switch of verl)",
    ),
    "data.filter_overlong_prompts_workers": (1, "the overlong filter runs once, when the dataset is read"),
    "reward_model.use_reward_loop": (
        True,
        "rlcore scores each batch in its reward stage (scorer processes and the reward-model worker group)",
    ),
}


def speed_only_notes(config: DictConfig) -> list[str]:
    """One note per :data:`SPEED_ONLY` key set to another value than rlcore's: it changes nothing."""
    from omegaconf import OmegaConf

    notes = []
    for key, (value, why) in SPEED_ONLY.items():
        given = OmegaConf.select(config, key, default=value)
        if given != value:
            notes.append(f"{key}={given} changes nothing in rlcore: {why}")
    return notes


def reward_model_notes(config: DictConfig) -> list[str]:
    """A note when ``reward_model.rollout.name`` is set for a discriminative reward model: only
    ``reward_model.reward_manager=judge`` generates with ``reward_model.rollout``."""
    from omegaconf import OmegaConf

    name = OmegaConf.select(config, "reward_model.rollout.name", default="hf")
    judge = OmegaConf.select(config, "reward_model.reward_manager", default="naive") == "judge"
    if OmegaConf.select(config, "reward_model.enable", default=False) and not judge and name != "hf":
        return [
            f"reward_model.rollout.name={name} changes nothing in rlcore: the reward model runs on its training "
            "engine (reward_model.strategy); reward_model.rollout.* configure reward_model.reward_manager=judge"
        ]
    return []


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_values(config: DictConfig) -> None:
    """Check single values that are meaningless or unsupported: zero or negative sizes and counts (a
    ``response_length`` of 0, ``total_training_steps=0``, ``total_epochs<=0``), negative timeouts, and the
    verl keys rlcore honours at one value only (:data:`ONLY_VALUES`). Raises one :class:`ConfigError` with
    every problem found."""
    from omegaconf import OmegaConf

    problems: list[str] = []
    for key in POSITIVE_KEYS + NULL_OR_POSITIVE_KEYS:
        value = OmegaConf.select(config, key, default=None)
        if value is None and key in NULL_OR_POSITIVE_KEYS:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            null = " or null" if key in NULL_OR_POSITIVE_KEYS else ""
            problems.append(f"{key} must be a positive integer{null}, got {value!r}")
    for key in NON_NEGATIVE_KEYS:
        value = OmegaConf.select(config, key, default=None)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            problems.append(f"{key} must be an integer >= 0, got {value!r}")
    for key in NON_NEGATIVE_SECONDS:
        value = OmegaConf.select(config, key, default=None)
        if value is not None and (not _number(value) or value < 0):
            problems.append(f"{key} must be a number of seconds >= 0 (0 or null: no limit), got {value!r}")
    for key, (allowed, why) in ONLY_VALUES.items():
        value = OmegaConf.select(config, key, default=None)
        if value not in allowed or type(value) not in {type(a) for a in allowed}:
            shown = " or ".join(repr(a) if isinstance(a, str) else str(a).lower() for a in allowed)
            problems.append(f"{key}={value!r} is not supported: {why} (allowed: {shown})")
    for key in ("actor_rollout_ref.rollout.temperature", "actor_rollout_ref.rollout.val_kwargs.temperature"):
        value = OmegaConf.select(config, key, default=None)
        if not _number(value) or value < 0:
            problems.append(f"{key} must be a number >= 0, got {value!r}")
    problems += async_training_problems(config)
    if config.reward_model.launch_reward_fn_async and config.algorithm.batch_filters:
        problems.append(
            "reward_model.launch_reward_fn_async=true cannot be combined with algorithm.batch_filters: "
            "the filters need the rewards before the log-probs are computed; turn one of them off"
        )
    if problems:
        raise ConfigError(*problems)


def _check_rollout_correction(config: DictConfig) -> None:
    """``algorithm.rollout_correction`` asks for known IS levels and RS options with valid thresholds, and
    has the rollout log-probs it needs; ``algorithm.pf_ppo`` names a known method (``rlcore.algos`` imports
    torch, so it is imported only when a feature is asked for)."""
    from rlcore.errors import RLCoreError

    if config.algorithm.get("use_pf_ppo", False):
        from rlcore.algos.pf_ppo import check_pf_ppo

        try:
            check_pf_ppo(config.algorithm.pf_ppo)
        except RLCoreError as exc:
            raise ConfigError(str(exc)) from exc
    correction = config.algorithm.get("rollout_correction") or {}
    level = correction.get("rollout_is")
    rejection = correction.get("rollout_rs")
    bypass = bool(correction.get("bypass_mode", False))
    if level is None and rejection is None and not bypass:
        return
    from rlcore.algos.rollout_correction import IS_LEVELS, parse_rejection_rules

    if level is not None and level not in IS_LEVELS:
        raise ConfigError(
            f"algorithm.rollout_correction.rollout_is must be one of {', '.join(IS_LEVELS)} or null, got {level!r}"
        )
    asked = [name for name, on in (("rollout_is", level), ("rollout_rs", rejection), ("bypass_mode", bypass)) if on]
    if not config.actor_rollout_ref.rollout.get("calculate_log_probs", False):
        raise ConfigError(
            f"algorithm.rollout_correction.{asked[0]} needs the engine's log-probs: "
            "set actor_rollout_ref.rollout.calculate_log_probs=true"
        )
    if bypass and (level or rejection):
        raise ConfigError(
            "algorithm.rollout_correction.bypass_mode=true uses the engine's log-probs as the old policy, so "
            f"{' and '.join(asked[:-1])} would compare them with themselves; rlcore does not recompute them per "
            "micro-batch as verl's bypass loss does: turn bypass_mode or the correction off"
        )
    threshold = correction.get("rollout_is_threshold")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not threshold > 0:
        raise ConfigError(f"algorithm.rollout_correction.rollout_is_threshold must be a number > 0, got {threshold!r}")
    if rejection is not None:
        try:
            parse_rejection_rules(rejection, correction.get("rollout_rs_threshold"))
        except RLCoreError as exc:
            raise ConfigError(str(exc)) from exc


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
    n = positive_key(config, "actor_rollout_ref.rollout.n")
    prompts = positive_key(config, "data.train_batch_size")
    mini = positive_key(config, "actor_rollout_ref.actor.ppo_mini_batch_size")
    epochs = positive_key(config, "actor_rollout_ref.actor.ppo_epochs")
    world = positive_key(config, "trainer.nnodes") * positive_key(config, "trainer.n_gpus_per_node")
    notes: list[str] = []

    if config.trainer.executor == "local" and world > 1:
        raise ConfigError(
            f"trainer.executor=local runs a single process, but trainer.nnodes x trainer.n_gpus_per_node = {world} "
            f"ranks were asked for; set trainer.executor=ray (or auto)"
        )
    if config.trainer.executor not in ("local", "ray"):
        raise ConfigError(f"trainer.executor must be 'auto', 'local' or 'ray', got {config.trainer.executor!r}")
    if config.data.truncation not in TRUNCATION_MODES:
        raise ConfigError(
            f"data.truncation must be one of {', '.join(TRUNCATION_MODES)}, got {config.data.truncation!r}"
        )
    positive_key(config, "data.max_prompt_length")
    positive_key(config, "data.max_response_length")
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
    notes += speed_only_notes(config)
    notes += reward_model_notes(config)
    notes += activation_offload_notes(config)
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
        sequence_parallel_size=ulysses_size(config, "actor_rollout_ref.actor"),
    )
