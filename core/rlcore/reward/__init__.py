"""Rewards: reward managers (token-level scores from a batch), rule-based scorers and safe scoring.

The public names (``RewardError``, ``RewardResult``, ``NaiveRewardManager``) are imported lazily so that
``import rlcore.reward`` does not import torch.
"""

from typing import Any

from rlcore.reward.errors import RewardError

#: public name -> the module that defines it
_LAZY = {"RewardResult": "rlcore.reward.managers", "NaiveRewardManager": "rlcore.reward.managers"}


def __getattr__(name: str) -> Any:
    """Lazy access to :class:`~rlcore.reward.managers.RewardResult` and
    :class:`~rlcore.reward.managers.NaiveRewardManager`."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rlcore.reward' has no attribute {name!r}")


__all__ = ["NaiveRewardManager", "RewardError", "RewardResult"]
