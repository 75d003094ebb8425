"""Registers the ``wandb`` tracker and its ``trainer.tracking.wandb`` settings; imports no wandb (nor torch)."""

from __future__ import annotations

from collections.abc import Callable

from rlcore import hookimpl
from rlcore_plugin_wandb.config import WandbConfig

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_trackers(register: Callable[..., None]) -> None:
    """Register the ``wandb`` tracker (imported on first use)."""
    register(
        "wandb",
        "rlcore_plugin_wandb.tracker:WandbTracker",
        aliases=("tracking",),
        description="Weights & Biases: online or offline (trainer.tracking.wandb)",
    )


@hookimpl
def config_defaults() -> WandbConfig:
    """``trainer.tracking.wandb``: every setting null, meaning "the environment variable, else the default"
    (see :mod:`rlcore_plugin_wandb.tracker`), typed (:class:`~rlcore_plugin_wandb.config.WandbConfig`)."""
    return WandbConfig()
