"""rlcore hooks of the PPO plugin. Imports no torch: the estimator and the loss are registered as lazy targets."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl
from rlcore.api import AdvantageEstimatorSpec

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_advantage_estimators(register: Any) -> None:
    """Register ``gae``, which declares ``needs_critic`` so the controller builds and trains a critic."""
    register(
        "gae",
        "rlcore_plugin_ppo.gae:compute_gae",
        description="PPO generalized advantage estimation (gamma, lam) with a learned critic",
        spec=AdvantageEstimatorSpec(needs_critic=True),
    )


@hookimpl
def register_policy_losses(register: Any) -> None:
    """Register ``dppo_tv`` (verl 0.10's DPPO-Binary-TV: a trust region on each token's probability change)."""
    register(
        "dppo_tv",
        "rlcore_plugin_ppo.dppo:dppo_tv_policy_loss",
        description="DPPO-Binary-TV: -A·sg(min(r, c))·logπ on tokens whose probability moved less than clip_ratio",
    )
