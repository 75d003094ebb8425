"""``trainer.tracking.mlflow``, the MLflow tracker's settings, as a typed section (torch-free: the hooks
module returns it from ``config_defaults``). Every setting is null by default, meaning "the environment
variable, else the default" (see :mod:`rlcore_plugin_mlflow.tracker`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlcore.api import Section, setting_or_env


@dataclass(frozen=True)
class MlflowConfig(Section):
    """``trainer.tracking.mlflow``: where and how the MLflow tracker logs (config wins over the environment)."""

    PATH = "trainer.tracking.mlflow"
    #: the store's folder, inside the run directory, when neither ``tracking_uri`` nor $MLFLOW_TRACKING_URI is set
    DEFAULT_STORE = "mlruns"
    #: the tracking store (null: $MLFLOW_TRACKING_URI, else file://<run_dir>/mlruns)
    tracking_uri: str | None = None
    #: the MLflow experiment (null: $MLFLOW_EXPERIMENT_NAME, else trainer.project_name)
    experiment_name: str | None = None

    def chosen_tracking_uri(self, run_dir: Path) -> str:
        """``tracking_uri``, else $MLFLOW_TRACKING_URI, else ``run_dir /`` :attr:`DEFAULT_STORE` (as written:
        :func:`rlcore_plugin_mlflow.tracker.store_uri` makes a path a ``file:`` URI)."""
        return str(setting_or_env(self.tracking_uri, "MLFLOW_TRACKING_URI", run_dir / self.DEFAULT_STORE))

    def chosen_experiment_name(self, project: str) -> str:
        """``experiment_name``, else $MLFLOW_EXPERIMENT_NAME, else ``project`` (the run's project name)."""
        return str(setting_or_env(self.experiment_name, "MLFLOW_EXPERIMENT_NAME", project))
