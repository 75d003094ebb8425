"""The names the algorithm code accepts, and their checks, without torch.

The loss aggregation modes, the KL estimators, the KL controller types and the LR schedule types are
checked here, once: by the algorithm code when it first uses a name (:mod:`rlcore.algos.losses`,
:mod:`rlcore.algos.kl_control`, :mod:`rlcore.modelkit.optim`) and by the dry run
(:func:`rlcore.config.validate.algorithm_value_problems`), which must work on a core installed without torch.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from rlcore.config.sections.algorithm import KLControlConfig
from rlcore.errors import RLCoreError

#: the loss aggregation modes (``loss_agg_mode``), verl's names
LOSS_AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
#: KL estimator names; a ``+`` suffix on any of them selects the straight-through variant
KL_PENALTY_TYPES: tuple[str, ...] = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
#: ``algorithm.kl_ctrl.type``
KL_CTRL_TYPES: tuple[str, ...] = ("fixed", "adaptive")
#: ``<optim>.lr_scheduler_type``
SCHEDULER_TYPES: tuple[str, ...] = ("constant", "cosine")


class KLPenaltyNotImplementedError(RLCoreError, NotImplementedError):
    """A KL estimator that rlcore names but does not implement (``full``)."""


def check_loss_agg_mode(mode: str, key: str = "loss_agg_mode") -> str:
    """Return ``mode`` if it is a known aggregation mode, else raise naming ``key`` and the modes."""
    if mode not in LOSS_AGG_MODES:
        raise RLCoreError(f"unknown {key} {mode!r}; expected one of: {', '.join(LOSS_AGG_MODES)}")
    return mode


def kl_base_type(kl_type: str, key: str) -> tuple[str, bool]:
    """Split ``kl_type`` into its base estimator and whether the ``+`` straight-through suffix is set; raise
    naming ``key`` for an unknown estimator."""
    straight_through = kl_type.endswith("+")
    base = kl_type[:-1] if straight_through else kl_type
    if base == "full":
        raise KLPenaltyNotImplementedError(
            f"{key} {kl_type!r}: the full-distribution KL is not implemented; use one of "
            f"{', '.join(KL_PENALTY_TYPES)} (optionally with a '+' suffix)"
        )
    if base not in KL_PENALTY_TYPES:
        raise RLCoreError(
            f"unknown {key} {kl_type!r}; expected one of: {', '.join(KL_PENALTY_TYPES)}, "
            "each optionally with a '+' suffix (straight-through: its value, the k2 gradient)"
        )
    return base, straight_through


def check_kl_penalty(kl_type: str, key: str = "kl_penalty") -> str:
    """Return ``kl_type`` if the KL estimator accepts it, else raise naming ``key``."""
    kl_base_type(kl_type, key)
    return kl_type


def check_kl_ctrl(kl_ctrl_config: Mapping[str, Any]) -> str:
    """Return the controller type of the ``algorithm.kl_ctrl`` section if the section describes one (a known
    ``type``; for ``adaptive``, a positive ``target_kl`` and ``horizon``), else raise naming the key."""
    kind = kl_ctrl_config.get("type", KLControlConfig.type)
    if kind not in KL_CTRL_TYPES:
        raise RLCoreError(f"unknown algorithm.kl_ctrl.type {kind!r}; expected one of: {', '.join(KL_CTRL_TYPES)}")
    if kind == "adaptive":
        for key in ("target_kl", "horizon"):
            value = float(kl_ctrl_config.get(key, getattr(KLControlConfig, key)))
            if value <= 0:
                raise RLCoreError(
                    f"algorithm.kl_ctrl.{key} must be positive for the adaptive controller, got {value:g}"
                )
    return str(kind)


def scheduler_type(name: str, legacy: str | None, key: str) -> str:
    """The schedule of the optimizer section at ``key``: its ``lr_scheduler_type`` ``name``, or the deprecated
    ``warmup_style`` ``legacy`` when that is set (it wins, as in verl)."""
    source = f"{key}.lr_scheduler_type"
    if legacy is not None:
        message = f"{key}.warmup_style is deprecated; use {key}.lr_scheduler_type"
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        name, source = legacy, f"{key}.warmup_style"
    if name not in SCHEDULER_TYPES:
        raise RLCoreError(f"{source}={name!r} is not a scheduler; use one of {', '.join(SCHEDULER_TYPES)}")
    return name
