"""rlcore hooks of the PPO plugin. Imports no torch: the estimator is registered as a lazy target."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl
from rlcore.api.specs import AdvantageEstimatorSpec

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=2,<3"


@hookimpl
def register_advantage_estimators(register: Any) -> None:
    """Register ``gae``, which declares ``needs_critic`` so the controller builds and trains a critic."""
    register(
        "gae",
        "rlcore_plugin_ppo.gae:compute_gae",
        description="PPO generalized advantage estimation (gamma, lam) with a learned critic",
        spec=AdvantageEstimatorSpec(needs_critic=True),
    )
