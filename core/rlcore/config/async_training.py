"""The ``async_training`` section: one-step-off-policy training (:mod:`rlcore.controller.off_policy`), checked
before any worker starts."""

from __future__ import annotations

from omegaconf import DictConfig

from rlcore.config.problems import ConfigError
from rlcore.config.sections.rollout import RolloutConfig
from rlcore.config.sections.trainer import AsyncTrainingConfig, TrainerConfig

ENABLE_KEY = "async_training.enable"
STALENESS_KEY = "async_training.max_staleness_steps"


def async_training_enabled(config: DictConfig) -> bool:
    """Whether ``async_training.enable`` asks for one-step-off-policy training."""
    return bool(AsyncTrainingConfig.from_tree(config).enable)


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


def check_async_training(config: DictConfig) -> None:
    """Raise one :class:`ConfigError` with every problem of :func:`async_training_problems` (the sections are
    built from ``config`` here: the controller has only the tree)."""
    section, trainer = AsyncTrainingConfig.from_tree(config), TrainerConfig.from_tree(config)
    problems = async_training_problems(section, trainer, RolloutConfig.from_tree(config))
    if problems:
        raise ConfigError(*problems)
