"""Asynchronous training's settings, resolved into one :class:`AsyncPlan` and checked before any worker starts:
verl's V1 modes (``trainer.v1``), verl's fully-async keys mapped onto them, and one-step-off-policy training
(``async_training.enable``), the special case of ``separate_async`` it is (:mod:`rlcore.controller.off_policy`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from omegaconf import DictConfig

from rlcore.config.problems import ConfigError
from rlcore.config.sections.actor import ActorConfig
from rlcore.config.sections.algorithm import AlgorithmConfig
from rlcore.config.sections.data import DataConfig
from rlcore.config.sections.rollout import RolloutConfig
from rlcore.config.sections.trainer import AsyncTrainingConfig, TrainerConfig

ENABLE_KEY = "async_training.enable"
STALENESS_KEY = "async_training.max_staleness_steps"
MODE_KEY = "trainer.v1.trainer_mode"
THRESHOLD_KEY = "trainer.v1.sampler.max_off_policy_threshold"
PARTIAL_KEY = "async_training.partial_rollout"
#: verl's partial rollout cuts the responses in flight when the trainer publishes weights, at no fixed length;
#: rlcore cuts them at chunk boundaries: without trainer.v1.partial_rollout_tokens, a response spans at most
#: this many chunks
PARTIAL_ROLLOUT_ROUNDS = 4


@dataclass(frozen=True)
class AsyncPlan:
    """How an asynchronous run issues, bounds and samples its prompt groups (:mod:`rlcore.controller.off_policy`).

    ``lane``: the rollout lane runs on a thread of its own (separate_async) instead of in the step
    (colocate_async); ``ahead``: prompt groups issued ahead of the step that trains them at the start;
    ``threshold``/``strategy``: the bound in verl's units (a group issued at version v and trained at version t
    spans t - v + 1 versions; null: none) and what happens beyond it; ``source``: the keys that asked for it;
    ``chunk``: tokens per partial-rollout call (``trainer.v1.partial_rollout_tokens``; 0: whole responses);
    ``rounds_ahead``: with a lane and chunks, the rounds the lane runs while the trainer trains, before it loads
    the new weights (``trainer.v1.separate_async.rounds_ahead``)."""

    mode: str
    lane: bool
    ahead: int
    threshold: int | None
    strategy: str
    source: str
    chunk: int = 0
    rounds_ahead: int = 0


#: the plan's note when nothing corrects for the behaviour policy's lag (the loss clips against the trainer's
#: recomputed old log-probs only)
UNCORRECTED_NOTE = (
    "note: no off-policy correction (algorithm.rollout_correction.rollout_is, rollout_rs and bypass_mode are off), "
    "so stale groups train as if the current policy had generated them"
)


def async_plan(config: DictConfig) -> AsyncPlan | None:
    """The asynchronous plan the config asks for (unchecked: see :func:`check_async_training`), None for sync."""
    section, trainer = AsyncTrainingConfig.from_tree(config), TrainerConfig.from_tree(config)
    batch = int(DataConfig.from_tree(config).train_batch_size)
    sampler = trainer.v1.sampler
    if section.enable:  # one-step-off: k batches ahead, each trained at most k updates after its weights
        k = int(section.max_staleness_steps)
        return AsyncPlan("separate_async", True, k * batch, k + 1, "drop", f"{ENABLE_KEY}=true, {STALENESS_KEY}={k}")
    mode = trainer.v1.trainer_mode
    if mode == "sync":
        return None
    sub = trainer.v1.colocate_async if mode == "colocate_async" else trainer.v1.separate_async
    warmup = float(sub.num_warmup_batches)
    source = f"{MODE_KEY}={mode}"
    if mode == "separate_async" and section.staleness_threshold is not None:
        warmup = float(section.staleness_threshold)
        source += f", async_training.staleness_threshold={section.staleness_threshold}"
    ahead = math.ceil(warmup * batch - 1e-9)
    chunk = int(trainer.v1.partial_rollout_tokens or 0)
    if not chunk and section.partial_rollout and mode == "separate_async":
        chunk = math.ceil(int(DataConfig.from_tree(config).max_response_length) / PARTIAL_ROLLOUT_ROUNDS)
        source += f", {PARTIAL_KEY}=true: chunks of data.max_response_length / {PARTIAL_ROLLOUT_ROUNDS}"
    lane = mode == "separate_async"
    return AsyncPlan(
        mode,
        lane,
        ahead,
        sampler.max_off_policy_threshold,
        sampler.max_off_policy_strategy,
        source,
        chunk,
        int(trainer.v1.separate_async.rounds_ahead) if lane and chunk else 0,
    )


def plan_line(config: DictConfig) -> str | None:
    """The dry run's line for an asynchronous run, naming the keys and what they mean (None for sync)."""
    plan = async_plan(config)
    if plan is None:
        return None
    bound = "none" if plan.threshold is None else f"{plan.threshold} version(s), {plan.strategy}"
    where = "a rollout lane beside the trainer" if plan.lane else "the step, before training"
    chunks = f", in partial-rollout chunks of {plan.chunk} tokens" if plan.chunk else ""
    if plan.lane and plan.chunk:
        chunks += (
            f" (the lane runs {plan.rounds_ahead} round(s) ahead while the trainer trains, then loads its weights: "
            "trainer.v1.separate_async.rounds_ahead)"
        )
    correction = AlgorithmConfig.from_tree(config).rollout_correction
    uncorrected = (
        "" if correction.rollout_is or correction.rollout_rs or correction.bypass_mode else f"; {UNCORRECTED_NOTE}"
    )
    return (
        f"async training: {plan.mode} ({plan.source}): {plan.ahead} prompt group(s) issued ahead, generated in "
        f"{where}{chunks}; staleness bound {bound}{uncorrected}"
    )


def async_training_problems(section: AsyncTrainingConfig, trainer: TrainerConfig, rollout: RolloutConfig) -> list[str]:
    """What is wrong with the ``async_training`` section for this run's ``trainer`` and ``rollout`` sections,
    one message per problem (empty when fine): the staleness bound must be a positive integer, and
    one-step-off-policy training needs split placement on Ray and the engine's log-probs."""
    problems: list[str] = []
    bound = section.max_staleness_steps
    if not isinstance(bound, int) or isinstance(bound, bool) or bound < 1:
        problems.append(f"{STALENESS_KEY} must be a positive integer (updates a batch may lag), got {bound!r}")
    if not section.enable:
        return problems
    if trainer.placement != "split":
        problems.append(
            f"{ENABLE_KEY}=true generates on the rollout pool while the trainer pool updates, so it needs "
            f"trainer.placement=split (got trainer.placement={trainer.placement!r}); set trainer.placement=split and "
            "trainer.rollout_n_gpus_per_node, or turn async_training.enable off"
        )
    if trainer.executor != "ray":
        problems.append(
            f"{ENABLE_KEY}=true needs trainer.executor=ray (got trainer.executor={trainer.executor!r}): the rollout "
            "and trainer pools are Ray worker groups"
        )
    if not rollout.calculate_log_probs:
        problems.append(
            f"{ENABLE_KEY}=true trains on batches generated with older weights and needs the generating policy's "
            "log-probs (rollout_log_probs, for algorithm.rollout_correction): set "
            "actor_rollout_ref.rollout.calculate_log_probs=true"
        )
    return problems


def v1_problems(
    section: AsyncTrainingConfig, trainer: TrainerConfig, rollout: RolloutConfig, data: DataConfig, actor: ActorConfig
) -> list[str]:
    """What is wrong with ``trainer.v1`` and verl's fully-async keys for this run, one message per problem: an
    async mode needs the engine's log-probs (and separate_async split placement on Ray), separate_async needs
    verl's invariant train_batch_size = parameter_sync_step × ppo_mini_batch_size, and the fully-async keys
    map only where their meaning is V1's."""
    problems: list[str] = []
    mode = trainer.v1.trainer_mode
    if not isinstance(section.require_batches, int) or section.require_batches < 1:
        problems.append(
            f"async_training.require_batches must be a positive integer (mini-batches per fetch), got "
            f"{section.require_batches!r}"
        )
    v0 = [key for key in ("staleness_threshold", "trigger_parameter_sync_step") if getattr(section, key) is not None]
    v0 += ["partial_rollout"] if section.partial_rollout is True else []
    if v0 and mode != "separate_async":
        problems.append(
            f"async_training.{v0[0]} is verl's fully-async trainer's key, which verl runs as V1's separate_async: set "
            f"{MODE_KEY}=separate_async"
        )
    if section.staleness_threshold is not None and not (
        isinstance(section.staleness_threshold, (int, float)) and section.staleness_threshold >= 0
    ):
        problems.append(
            f"async_training.staleness_threshold must be a number >= 0, got {section.staleness_threshold!r}"
        )
    if mode == "sync":
        return problems
    if section.enable:
        problems.append(f"{ENABLE_KEY}=true is one-step-off training (separate_async); leave {MODE_KEY}=sync with it")
    if not rollout.calculate_log_probs:
        problems.append(
            f"{MODE_KEY}={mode} trains on groups generated with older weights and needs the generating policy's "
            "log-probs (rollout_log_probs): set actor_rollout_ref.rollout.calculate_log_probs=true"
        )
    if trainer.v1.partial_rollout_tokens and rollout.multi_turn.enable:
        problems.append(
            f"trainer.v1.partial_rollout_tokens={trainer.v1.partial_rollout_tokens}: multi-turn agent loops "
            "(actor_rollout_ref.rollout.multi_turn.enable=true) generate turn by turn and have no partial rollout; "
            "set it to null"
        )
    elif section.partial_rollout is True and rollout.multi_turn.enable:
        problems.append(
            f"{PARTIAL_KEY}=true: multi-turn agent loops (actor_rollout_ref.rollout.multi_turn.enable=true) generate "
            "turn by turn and have no partial rollout in rlcore (verl resumes them under the new weights); set it to "
            "false"
        )
    if mode == "separate_async":
        if trainer.placement != "split" or trainer.executor != "ray":
            problems.append(
                f"{MODE_KEY}=separate_async generates on the rollout ranks while the trainer ranks train: it needs "
                f"trainer.placement=split and trainer.executor=ray (got {trainer.placement!r}, {trainer.executor!r})"
            )
        sync_step, key = sync_mini_batches(section, trainer)
        mini = int(actor.ppo_mini_batch_size)
        if sync_step * mini != data.train_batch_size:
            problems.append(
                f"{key}={sync_step}: verl's separate_async needs data.train_batch_size = {key} × "
                f"actor_rollout_ref.actor.ppo_mini_batch_size ({data.train_batch_size} != {sync_step} × {mini}); rlcore "
                "trains the step's mini-batches once its batch is sampled, so set it to "
                f"{data.train_batch_size // mini if data.train_batch_size % mini == 0 else 'a divisor'}"
            )
    return problems


def sync_mini_batches(section: AsyncTrainingConfig, trainer: TrainerConfig) -> tuple[int, str]:
    """The mini-batch updates between weight syncs (V1's ``parameter_sync_step``) and the keys that say it:
    verl's fully-async trainer fetches ``require_batches`` mini-batches per update step and syncs every
    ``trigger_parameter_sync_step`` steps."""
    if not section.trigger_parameter_sync_step:
        return trainer.v1.separate_async.parameter_sync_step, "trainer.v1.separate_async.parameter_sync_step"
    if section.require_batches == 1:
        return section.trigger_parameter_sync_step, "async_training.trigger_parameter_sync_step"
    return (
        section.trigger_parameter_sync_step * section.require_batches,
        "async_training.trigger_parameter_sync_step × async_training.require_batches",
    )


def resolve_fully_async(config: DictConfig) -> None:
    """verl's fully-async keys (``async_training.staleness_threshold``, ``trigger_parameter_sync_step``) are read
    only by its fully-async trainer, which verl runs as V1's separate_async: with ``trainer.v1.trainer_mode`` left
    at ``sync`` and one-step-off off, they select ``separate_async``. That trainer takes ``data.train_batch_size=0``
    (its rollouter streams prompts one by one and its trainer fetches mini-batches): then set it to the prompts
    between weight syncs, the step's batch in rlcore (sync mini-batches × ``actor_rollout_ref.actor.ppo_mini_batch_size``)."""
    data, section, v1 = config.data, config.async_training, config.trainer.v1
    trigger, fetch = section.get("trigger_parameter_sync_step"), section.get("require_batches")
    fully_async = trigger is not None or section.get("staleness_threshold") is not None
    if fully_async and v1.get("trainer_mode") == "sync" and section.get("enable") is False:
        v1.trainer_mode = "separate_async"
    mini = config.actor_rollout_ref.actor.get("ppo_mini_batch_size")
    mode = v1.get("trainer_mode")
    counts = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (trigger, fetch, mini))
    if data.get("train_batch_size") == 0 and mode == "separate_async" and counts:
        data.train_batch_size = trigger * fetch * mini


def check_async_training(config: DictConfig) -> None:
    """Raise one :class:`ConfigError` with every problem of :func:`async_training_problems` and
    :func:`v1_problems` (the sections are built from ``config`` here: the controller has only the tree)."""
    section, trainer = AsyncTrainingConfig.from_tree(config), TrainerConfig.from_tree(config)
    rollout = RolloutConfig.from_tree(config)
    problems = async_training_problems(section, trainer, rollout)
    problems += v1_problems(
        section,
        trainer,
        rollout,
        DataConfig.from_tree(config),
        ActorConfig.from_tree(config, "actor_rollout_ref.actor"),
    )
    if problems:
        raise ConfigError(*problems)
