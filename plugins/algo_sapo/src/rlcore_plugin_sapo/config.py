"""SAPO's two keys of ``actor_rollout_ref.actor`` as a typed section with verl's defaults (torch-free: the
hooks module returns it from ``config_defaults``)."""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.api import Section


@dataclass(frozen=True)
class SAPOActorConfig(Section):
    """The gate temperatures of the ``sapo`` policy loss."""

    PATH = "actor_rollout_ref.actor"
    #: the sigmoid gate's temperature where the advantage is positive (> 0)
    tau_pos: float = 1.0
    #: the gate's temperature where the advantage is zero or negative (> 0)
    tau_neg: float = 1.05
