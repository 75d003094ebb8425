"""``trainer.tracking.mlflow``, the MLflow tracker's settings, as a typed section (torch-free: the hooks
module returns it from ``config_defaults``). Every setting is null by default, meaning "the environment
variable, else the default" (see :mod:`rlcore_plugin_mlflow.tracker`)."""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.api import Section


@dataclass(frozen=True)
class MlflowConfig(Section):
    """``trainer.tracking.mlflow``: where and how the MLflow tracker logs (config wins over the environment)."""

    PATH = "trainer.tracking.mlflow"
    #: the tracking store (null: $MLFLOW_TRACKING_URI, else file://<run_dir>/mlruns)
    tracking_uri: str | None = None
    #: the MLflow experiment (null: $MLFLOW_EXPERIMENT_NAME, else trainer.project_name)
    experiment_name: str | None = None
