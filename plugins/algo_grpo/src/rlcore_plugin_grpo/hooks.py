"""rlcore hooks of the GRPO plugin. Imports no torch: the estimator is registered as a lazy target."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl


@hookimpl
def register_advantage_estimators(register: Any) -> None:
    """Register ``grpo``: group-relative outcome advantages (works with groups of any size, even 1)."""
    register(
        "grpo",
        "rlcore_plugin_grpo.advantage:compute_grpo_outcome_advantage",
        description="GRPO: (r - group mean) / (group std + eps), no critic",
    )


@hookimpl
def config_defaults() -> dict[str, Any]:
    """Declare ``algorithm.norm_adv_by_std_in_grpo`` (false gives Dr. GRPO's unscaled advantages)."""
    return {"algorithm": {"norm_adv_by_std_in_grpo": True}}
