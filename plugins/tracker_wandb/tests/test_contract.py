"""rlcore's tracker contract on the ``wandb`` tracker, offline, in a temporary directory."""

from __future__ import annotations

from pathlib import Path

from rlcore_testkit.contracts.tracker import TrackerContract


class TestWandbContract(TrackerContract):
    """wandb (offline mode) passes the tracker contract."""

    component_name = "wandb"
    tracking = {"wandb": {"mode": "offline"}}

    def read_back(self, run_dir: Path) -> None:
        """Every step is in the offline run's history."""
        from rlcore_plugin_wandb.offline import history, offline_records

        (record,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
        rows = history(offline_records(record))
        assert [row["_step"] for row in rows] == [1, 2, 3]
        assert [row["critic/score/mean"] for row in rows] == [0.25, 0.5, 0.75]
        assert "actor/pg_loss" not in rows[1]  # NaN is skipped
