"""The tracker: rlcore's contract suite, reading back what the tracker wrote."""

from __future__ import annotations

import json
from pathlib import Path

from rlcore_testkit.contracts import TrackerContract


class TestTrackerContract(TrackerContract):
    """rlcore's behavioural checks for ``trainer.logger=[{{ cookiecutter.hyphenated }}]``."""

    component_name = "{{ cookiecutter.hyphenated }}"

    def read_back(self, run_dir: Path) -> None:
        """One line per logged step, in order, with NaN written as null."""
        lines = [json.loads(line) for line in (run_dir / "{{ cookiecutter.underscored }}.jsonl").read_text().splitlines()]
        assert [line["step"] for line in lines] == [step for step, _ in self.LOGGED_STEPS]
        assert lines[1]["metrics"]["actor/pg_loss"] is None
        assert lines[0]["metrics"]["critic/score/mean"] == 0.25
