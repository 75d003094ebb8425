"""Registers the ``mlflow`` tracker and its ``trainer.tracking.mlflow`` settings, and records the run's directory
for the ``mlflow`` rollout-trace backend; imports no mlflow (nor torch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlcore import hookimpl
from rlcore_plugin_mlflow.config import MlflowConfig

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_trackers(register: Callable[..., None]) -> None:
    """Register the ``mlflow`` tracker (imported on first use)."""
    register(
        "mlflow",
        "rlcore_plugin_mlflow.tracker:MlflowTracker",
        description="MLflow; a local file store by default (trainer.tracking.mlflow)",
    )


@hookimpl
def config_defaults() -> MlflowConfig:
    """``trainer.tracking.mlflow``: every setting null, meaning "the environment variable, else the default"
    (see :mod:`rlcore_plugin_mlflow.tracker`), typed (:class:`~rlcore_plugin_mlflow.config.MlflowConfig`)."""
    return MlflowConfig()


@hookimpl
def on_run_start(run: Any) -> None:
    """Remember the run's directory: the default store of ``rollout.trace.backend=mlflow`` is
    ``<run_dir>/mlruns``, as the tracker's (:mod:`rlcore_plugin_mlflow.tracing`)."""
    from rlcore_plugin_mlflow.tracing import remember_run_dir

    remember_run_dir(run.run_dir)
