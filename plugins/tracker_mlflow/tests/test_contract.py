"""rlcore's tracker contract on the ``mlflow`` tracker, offline, in a temporary directory."""

from __future__ import annotations

from pathlib import Path

from rlcore_testkit.contracts.tracker import TrackerContract


class TestMlflowContract(TrackerContract):
    """mlflow (local file store) passes the tracker contract."""

    component_name = "mlflow"

    def read_back(self, run_dir: Path) -> None:
        """The run holds every step of a metric, under its MLflow-safe name."""
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=(run_dir / "mlruns").as_uri())
        (run,) = client.search_runs([client.get_experiment_by_name("rlcore-contract").experiment_id])
        history = client.get_metric_history(run.info.run_id, "val-core/openai/gsm8k/reward/mean_at_1")
        assert [(m.step, m.value) for m in history] == [(3, 0.6)]
