"""Rewards: reward managers (token-level scores from a batch), rule-based scorers and safe scoring.

``RewardResult`` is imported lazily so that ``import rlcore.reward`` does not import torch.
"""

from typing import Any

from rlcore.errors import RLCoreError


class RewardError(RLCoreError):
    """A reward configuration problem, or a scorer failure with ``reward_model.scorer_fail_fast=true``."""


def __getattr__(name: str) -> Any:
    """Lazy access to :class:`rlcore.reward.managers.RewardResult`."""
    if name == "RewardResult":
        from rlcore.reward.managers import RewardResult

        return RewardResult
    raise AttributeError(f"module 'rlcore.reward' has no attribute {name!r}")


__all__ = ["RewardError", "RewardResult"]
