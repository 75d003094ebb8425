"""rlcore hooks of the OPO plugin. Imports no torch: the estimator is registered as a lazy target."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_advantage_estimators(register: Any) -> None:
    """Register ``opo``: each response's reward minus its group's length-weighted mean reward."""
    register(
        "opo",
        "rlcore_plugin_opo.advantage:compute_opo_outcome_advantage",
        description="OPO: r - sum(|y|·r)/sum(|y|) over the prompt's responses, no critic",
    )
