"""rlcore hooks of the GPG plugin. Imports no torch: the components are registered as lazy targets."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_advantage_estimators(register: Any) -> None:
    """Register ``gpg``: the reward minus the group mean, scaled by the batch's share of nonzero rewards."""
    register(
        "gpg",
        "rlcore_plugin_gpg.gpg:compute_gpg_outcome_advantage",
        description="GPG: B / max(1, #nonzero rewards) * (r - group mean), no critic",
    )


@hookimpl
def register_policy_losses(register: Any) -> None:
    """Register the ``gpg`` policy loss: the plain policy gradient −logπ·A, with no ratio and no clip."""
    register("gpg", "rlcore_plugin_gpg.gpg:gpg_policy_loss", description="GPG: -log pi * A, no ratio, no clip")
