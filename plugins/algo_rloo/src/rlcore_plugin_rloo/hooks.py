"""rlcore hooks of the RLOO plugin. Imports no torch: the estimator is registered as a lazy target."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_advantage_estimators(register: Any) -> None:
    """Register ``rloo``: each response's reward minus the mean reward of the other responses to its prompt."""
    register(
        "rloo",
        "rlcore_plugin_rloo.advantage:compute_rloo_outcome_advantage",
        description="RLOO: r - mean of the other responses to the prompt, no critic",
    )
