"""What ``skip.rollout`` (verl's RolloutSkip) cannot run with: checked before anything starts."""

from __future__ import annotations

from rlcore.config.sections.skip import SkipConfig
from rlcore.config.sections.trainer import AsyncTrainingConfig

#: verl's ``skip.rollout.action`` values
SKIP_ACTIONS: tuple[str, ...] = ("cache", "repeat")


def rollout_skip_problems(skip: SkipConfig, async_training: AsyncTrainingConfig | None) -> list[str]:
    """One line per problem of ``skip.rollout``: an unknown action, a step below 1, or one-step-off training
    (its generation runs a step ahead, which verl's ``skip.async_rollout`` keys by sample; not in rlcore)."""
    section = skip.rollout
    if not section.enable:
        return []
    problems = []
    if section.action not in SKIP_ACTIONS:
        problems.append(f"skip.rollout.action={section.action!r}: use one of {', '.join(SKIP_ACTIONS)}")
    bad = [step for step in section.steps if isinstance(step, bool) or not isinstance(step, int) or step < 1]
    if bad:
        problems.append(f"skip.rollout.steps: training steps are integers from 1, got {bad}")
    if async_training is not None and async_training.enable:
        problems.append(
            "skip.rollout.enable=true with async_training.enable=true: the rollout lane generates a step ahead; "
            "verl's skip.async_rollout (by sample) is not in rlcore"
        )
    return problems
