"""rlcore's tracker contract on the ``tensorboard`` tracker, offline, in a temporary directory."""

from __future__ import annotations

from pathlib import Path

from rlcore_testkit.contracts.tracker import TrackerContract


class TestTensorboardContract(TrackerContract):
    """tensorboard passes the tracker contract."""

    component_name = "tensorboard"

    def read_back(self, run_dir: Path) -> None:
        """NaN is skipped; the other values are scalars."""
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(run_dir / "tensorboard"))
        events.Reload()
        assert [(e.step, e.value) for e in events.Scalars("critic/score/mean")] == [(1, 0.25), (2, 0.5), (3, 0.75)]
        assert "actor/pg_loss" not in events.Tags()["scalars"]
