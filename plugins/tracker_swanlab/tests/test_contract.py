"""rlcore's tracker contract on the ``swanlab`` tracker, offline, in a temporary directory."""

from __future__ import annotations

from pathlib import Path

from rlcore_testkit.contracts.tracker import TrackerContract


class TestSwanlabContract(TrackerContract):
    """swanlab (offline mode) passes the tracker contract."""

    component_name = "swanlab"
    tracking = {"swanlab": {"mode": "offline"}}

    def read_back(self, run_dir: Path) -> None:
        """The offline run file holds the logged metric names."""
        (record,) = (run_dir / "swanlog").glob("run-*/run-*.swanlab")
        assert b"response_length/mean" in record.read_bytes()
