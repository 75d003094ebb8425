"""Registers the ``swanlab`` tracker and its ``trainer.tracking.swanlab`` settings; imports no swanlab (nor torch)."""

from __future__ import annotations

from collections.abc import Callable

from rlcore import hookimpl
from rlcore_plugin_swanlab.config import SwanlabConfig

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_trackers(register: Callable[..., None]) -> None:
    """Register the ``swanlab`` tracker (imported on first use)."""
    register(
        "swanlab",
        "rlcore_plugin_swanlab.tracker:SwanlabTracker",
        description="SwanLab: cloud, local or offline (trainer.tracking.swanlab)",
    )


@hookimpl
def config_defaults() -> SwanlabConfig:
    """``trainer.tracking.swanlab``: every setting null, meaning "the environment variable, else the default"
    (see :mod:`rlcore_plugin_swanlab.tracker`), typed (:class:`~rlcore_plugin_swanlab.config.SwanlabConfig`)."""
    return SwanlabConfig()
