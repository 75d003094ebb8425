"""Registers the ``mlflow`` tracker and its ``trainer.tracking.mlflow`` settings; imports no mlflow (nor torch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlcore import hookimpl


@hookimpl
def register_trackers(register: Callable[..., None]) -> None:
    """Register the ``mlflow`` tracker (imported on first use)."""
    register(
        "mlflow",
        "rlcore_plugin_mlflow.tracker:MlflowTracker",
        description="MLflow; a local file store by default (trainer.tracking.mlflow)",
    )


@hookimpl
def config_defaults() -> dict[str, Any]:
    """``trainer.tracking.mlflow``: every setting null, meaning "the environment variable, else the default"
    (see :mod:`rlcore_plugin_mlflow.tracker`)."""
    return {"trainer": {"tracking": {"mlflow": {"tracking_uri": None, "experiment_name": None}}}}
