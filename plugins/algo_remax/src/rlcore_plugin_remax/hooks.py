"""rlcore hooks of the ReMax plugin. Imports no torch: the estimator is registered as a lazy target."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl
from rlcore.api import AdvantageEstimatorSpec

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_advantage_estimators(register: Any) -> None:
    """Register ``remax``, which declares ``needs_greedy_baseline`` so the controller also decodes one greedy
    response per prompt and passes its reward as ``reward_baselines``."""
    register(
        "remax",
        "rlcore_plugin_remax.advantage:compute_remax_outcome_advantage",
        description="ReMax: return minus the reward of the prompt's greedy response, no critic",
        spec=AdvantageEstimatorSpec(needs_greedy_baseline=True),
    )
