"""rlcore hooks of the CISPO plugin. Imports no torch: the loss is registered as a lazy target."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_policy_losses(register: Any) -> None:
    """Register the ``cispo`` policy loss (clipped, stop-gradient importance weight times −A·logπ)."""
    register(
        "cispo",
        "rlcore_plugin_cispo.loss:cispo_policy_loss",
        description="CISPO: -sg(clip(ratio))·A·logπ, every token keeps a gradient",
    )
