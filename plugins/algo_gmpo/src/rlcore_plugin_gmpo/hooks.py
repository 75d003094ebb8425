"""rlcore hooks of the GMPO plugin. Imports no torch: the loss is registered as a lazy target."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_policy_losses(register: Any) -> None:
    """Register the ``geo_mean`` policy loss (GMPO: geometric mean of the clipped token ratios)."""
    register(
        "geo_mean",
        "rlcore_plugin_gmpo.loss:geo_mean_policy_loss",
        description="GMPO: -mean_t(A)·exp(mean_t clipped log-ratio), mean over sequences",
    )
