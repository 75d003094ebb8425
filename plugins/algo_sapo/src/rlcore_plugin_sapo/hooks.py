"""rlcore hooks of the SAPO plugin: the loss (a lazy target, no torch here) and its two temperature keys."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl
from rlcore_plugin_sapo.config import SAPOActorConfig

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_policy_losses(register: Any) -> None:
    """Register the ``sapo`` policy loss (a smooth sigmoid gate on the ratio instead of a hard clip)."""
    register(
        "sapo",
        "rlcore_plugin_sapo.loss:sapo_policy_loss",
        description="SAPO: -sigmoid(tau·(ratio-1))·(4/tau)·A, seq-mean-token-mean",
    )


@hookimpl
def config_defaults() -> SAPOActorConfig:
    """Declare ``actor_rollout_ref.actor.tau_pos`` (1.0) and ``tau_neg`` (1.05), verl's SAPO temperatures
    (:class:`~rlcore_plugin_sapo.config.SAPOActorConfig`)."""
    return SAPOActorConfig()
