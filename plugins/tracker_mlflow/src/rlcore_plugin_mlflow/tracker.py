"""The ``mlflow`` tracker: metrics, params, run metadata and validation tables to an MLflow tracking store.

Settings (``trainer.tracking.mlflow``; config wins over the environment, which wins over the default):

``tracking_uri``
    the tracking store: ``file:///abs/path/mlruns`` or a plain path (a local file store), ``sqlite:///...``
    or ``http(s)://server``. Environment: ``MLFLOW_TRACKING_URI``; default ``file://<run_dir>/mlruns``
    (view it with ``mlflow ui --backend-store-uri <that uri>``).
``experiment_name``
    the MLflow experiment. Environment: ``MLFLOW_EXPERIMENT_NAME``; default ``trainer.project_name``.

MLflow 3 refuses local file stores unless ``MLFLOW_ALLOW_FILE_STORE=true``; when the tracking URI is a
file store and the variable is unset, this tracker sets it. The run is named ``trainer.experiment_name``;
the flattened config becomes its params, ``config.yaml`` and ``rlcore_metadata.json`` its artifacts, the
metadata also its ``rlcore.*`` tags. Metric names are made MLflow-safe (``mean@1`` -> ``mean_at_1``).
Validation generations go to ``tables/<name>.json`` (MLflow's table format: ``columns`` and ``data``),
one file per table name holding every logged step.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from rlcore.api import ExternalTracker, flatten, numeric_metrics, table_data, tracker_section
from rlcore_plugin_mlflow.config import MlflowConfig

#: MLflow's batch limits (params/tags and metrics per ``log_batch`` call)
MAX_PARAMS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
#: MLflow's length limits for param keys and values
MAX_KEY_LENGTH = 250
MAX_VALUE_LENGTH = 6000


def mlflow_key(key: str) -> str:
    """An MLflow-safe metric/param name: ``@`` becomes ``_at_``, other characters MLflow rejects ``_``."""
    return re.sub(r"[^\w\-. :/]", "_", key.replace("@", "_at_"))[:MAX_KEY_LENGTH]


def file_store_uri(uri: str) -> bool:
    """Whether ``uri`` names a local file store (a ``file:`` URI or a path without a scheme)."""
    return uri.startswith("file:") or re.match(r"^[A-Za-z][\w+.\-]*://", uri) is None


def store_uri(uri: str) -> str:
    """The tracking store ``uri`` as MLflow takes it: a path becomes a ``file:`` URI; for a local file store,
    ``MLFLOW_ALLOW_FILE_STORE=true`` is set when unset (MLflow 3 refuses file stores without it)."""
    if file_store_uri(uri):
        if not uri.startswith("file:"):
            uri = Path(uri).expanduser().resolve().as_uri()
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return uri


class MlflowTracker(ExternalTracker):
    """Logs to one MLflow run through ``MlflowClient`` (no global ``mlflow`` state is touched)."""

    name: ClassVar[str] = "mlflow"
    requires: ClassVar[tuple[str, ...]] = ("mlflow",)
    extra: ClassVar[str] = "mlflow"
    #: what ``actor_rollout_ref.rollout.trace.backend=mlflow`` uses (:mod:`rlcore_plugin_mlflow.tracing`)
    trace_backend: ClassVar[str] = "rlcore_plugin_mlflow.tracing:MlflowTraceBackend"

    def start(self) -> None:
        """Create (or reuse) the experiment, create the run, log params, tags and metadata artifacts."""
        import yaml
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        settings = tracker_section(self.config, MlflowConfig)
        self.tracking_uri = store_uri(settings.chosen_tracking_uri(self.run_dir))
        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        experiment_name = settings.chosen_experiment_name(self.project)
        experiment = self.client.get_experiment_by_name(experiment_name)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(experiment_name)
        tags = {
            "rlcore.version": str(self.metadata["rlcore_version"]),
            "rlcore.git_commit": str(self.metadata["git_commit"]),
            "rlcore.run_dir": str(self.metadata["run_dir"]),
            "mlflow.note.content": f"rlcore run in {self.metadata['run_dir']}",
            **{f"rlcore.plugin.{name}": str(version) for name, version in self.metadata["plugins"].items()},
        }
        self.run_id = self.client.create_run(experiment_id, run_name=self.experiment, tags=tags).info.run_id
        params = [
            Param(mlflow_key(key), str(value)[:MAX_VALUE_LENGTH]) for key, value in flatten(self.config_dict).items()
        ]
        for start in range(0, len(params), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=params[start : start + MAX_PARAMS_PER_BATCH])
        self.client.log_text(self.run_id, yaml.safe_dump(self.config_dict, sort_keys=False), "config.yaml")
        self.client.log_dict(self.run_id, self.metadata, "rlcore_metadata.json")
        self._tables: dict[str, tuple[list[str], list[list[Any]]]] = {}

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Log the step's finite numeric metrics in batches."""
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        batch = [Metric(mlflow_key(k), v, timestamp, int(step)) for k, v in numeric_metrics(metrics).items()]
        for start in range(0, len(batch), MAX_METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=batch[start : start + MAX_METRICS_PER_BATCH])

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        """Append the rows (with a ``step`` column) to the artifact ``tables/<name>.json``."""
        if not rows:
            return
        columns, data = table_data(rows, step)
        known, logged = self._tables.setdefault(name, (columns, []))
        for column in columns:
            if column not in known:
                known.append(column)
                for row in logged:
                    row.append(None)
        logged.extend([row[columns.index(c)] if c in columns else None for c in known] for row in data)
        safe = re.sub(r"[^\w.\-]+", "_", name).strip("._") or "table"
        self.client.log_dict(self.run_id, {"columns": known, "data": logged}, f"tables/{safe}.json")

    def close(self) -> None:
        """Mark the run finished."""
        self.client.set_terminated(self.run_id, "FINISHED")
