"""The experiment tracker ``{{ cookiecutter.hyphenated }}`` (``trainer.logger=[console,{{ cookiecutter.hyphenated }}]``).

What it does: appends one JSON line per step to ``<run dir>/{{ cookiecutter.underscored }}.jsonl`` — ``{"step": N, "metrics":
{...}}`` with NaN and infinities written as ``null`` — and closes the file in :meth:`Tracker.finish`.

What to change: replace the file by your service's client: connect in ``__init__`` (``project`` and
``experiment`` come from ``trainer.project_name`` / ``trainer.experiment_name``, ``config`` is the whole
run config), send in :meth:`Tracker.log`, flush and close in :meth:`Tracker.finish`. A tracker that
raises is logged once and switched off; it never stops training. ``tests/test_tracker.py`` runs
rlcore's contract suite on it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def to_json(value: Any) -> Any:
    """``value`` as JSON: numbers as python numbers, NaN and infinities as None, anything else as text."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else None
    if hasattr(value, "item"):  # numpy and torch scalars
        return to_json(value.item())
    return str(value)


class Tracker:
    """Metrics as JSON lines in the run directory.

    Args:
        project: the project name (``trainer.project_name``).
        experiment: the experiment name (``trainer.experiment_name``).
        config: the resolved run config.
        run_dir: this run's directory.
    """

    def __init__(self, project: str, experiment: str, config: Any, run_dir: str | Path) -> None:
        self.project = project
        self.experiment = experiment
        self.path = Path(run_dir) / "{{ cookiecutter.underscored }}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = self.path.open("a", encoding="utf-8")

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Append one line for ``step``."""
        line = {"step": step, "metrics": {key: to_json(value) for key, value in metrics.items()}}
        self.handle.write(json.dumps(line) + "\n")
        self.handle.flush()

    def finish(self) -> None:
        """Close the file (called once at the end of the run)."""
        self.handle.close()
