"""rlcore hooks of the REINFORCE++ plugin. Imports no torch: the estimators are registered as lazy targets."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_advantage_estimators(register: Any) -> None:
    """Register ``reinforce_plus_plus`` (batch-whitened discounted returns) and ``reinforce_plus_plus_baseline``
    (batch-whitened reward minus the group mean)."""
    register(
        "reinforce_plus_plus",
        "rlcore_plugin_reinforce_pp.advantage:compute_reinforce_plus_plus_outcome_advantage",
        description="REINFORCE++: discounted returns (gamma), whitened over the batch, no critic",
    )
    register(
        "reinforce_plus_plus_baseline",
        "rlcore_plugin_reinforce_pp.advantage:compute_reinforce_plus_plus_baseline_outcome_advantage",
        description="REINFORCE++-baseline: r - group mean, whitened over the batch, no critic",
    )
