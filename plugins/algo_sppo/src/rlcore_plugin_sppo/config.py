"""SPPO's two ``sppo_eta`` keys (verl's recipe) as typed sections with their defaults (torch-free: the hooks
module returns them from ``config_defaults``)."""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.api import Section


@dataclass(frozen=True)
class SPPOAlgorithmConfig(Section):
    """SPPO's key of ``algorithm``."""

    PATH = "algorithm"
    #: β of the batch soft-mean baseline of the ``sppo`` advantage estimator
    sppo_eta: float = 1.0


@dataclass(frozen=True)
class SPPOActorConfig(Section):
    """SPPO's key of ``actor_rollout_ref.actor``."""

    PATH = "actor_rollout_ref.actor"
    #: η of the ``sppo`` policy loss (the target of the sequence log-ratio is η·A)
    sppo_eta: float = 1.0
