"""The reward error (a leaf module: the managers and the scoring helpers raise it, ``rlcore.reward`` exports it)."""

from rlcore.errors import RLCoreError


class RewardError(RLCoreError):
    """A reward configuration problem, or a scorer failure with ``reward_model.scorer_fail_fast=true``."""
