"""Registers the ``tensorboard`` tracker and its ``trainer.tracking.tensorboard`` settings; imports no tensorboard (nor torch)."""

from __future__ import annotations

from collections.abc import Callable

from rlcore import hookimpl
from rlcore_plugin_tensorboard.config import TensorboardConfig

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_trackers(register: Callable[..., None]) -> None:
    """Register the ``tensorboard`` tracker (imported on first use)."""
    register(
        "tensorboard",
        "rlcore_plugin_tensorboard.tracker:TensorboardTracker",
        description="TensorBoard event files (trainer.tracking.tensorboard)",
    )


@hookimpl
def config_defaults() -> TensorboardConfig:
    """``trainer.tracking.tensorboard``: every setting null, meaning "the environment variable, else the default"
    (see :mod:`rlcore_plugin_tensorboard.tracker`), typed (:class:`~rlcore_plugin_tensorboard.config.TensorboardConfig`)."""
    return TensorboardConfig()
