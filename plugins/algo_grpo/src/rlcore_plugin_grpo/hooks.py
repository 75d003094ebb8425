"""rlcore hooks of the GRPO plugin. Imports no torch: the estimators are registered as lazy targets."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl
from rlcore.api.specs import AdvantageEstimatorSpec

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=2,<3"


@hookimpl
def register_advantage_estimators(register: Any) -> None:
    """Register ``grpo`` (group-relative outcome advantages, groups of any size, even 1) and ``grpo_passk``
    (the best response's margin over the runner-up; declares a ``min_group_size`` of 2)."""
    register(
        "grpo",
        "rlcore_plugin_grpo.advantage:compute_grpo_outcome_advantage",
        description="GRPO: (r - group mean) / (group std + eps), no critic",
    )
    register(
        "grpo_passk",
        "rlcore_plugin_grpo.advantage:compute_grpo_passk_outcome_advantage",
        description="Pass@k: only each group's best response learns, from its margin over the runner-up",
        spec=AdvantageEstimatorSpec(min_group_size=2),
    )


@hookimpl
def config_defaults() -> dict[str, Any]:
    """Declare ``algorithm.norm_adv_by_std_in_grpo`` (false gives Dr. GRPO's unscaled advantages)."""
    return {"algorithm": {"norm_adv_by_std_in_grpo": True}}
