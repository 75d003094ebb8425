"""``rlcore health RUN_DIR`` on hand-written run directories: a missing or broken ``metrics.jsonl`` is one line
naming the file; a run being written (a truncated last line) is replayed up to its last whole row; without a
``config.yaml`` the current defaults apply; no enabled monitor is said, exit 0. The built-in monitors
(rlcore-plugin-health) are switched off, so that only the test plugin's monitor speaks."""

from __future__ import annotations

import dataclasses
import json
import os
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import rlcore
from rlcore.api import Finding, HealthMonitorSpec, HealthView, MonitorSettings
from rlcore.cli import cli


@dataclasses.dataclass(frozen=True)
class CeilingSettings(MonitorSettings):
    PATH = "trainer.monitors.ceiling"
    #: a training score above this is a finding
    ceiling: float = 0.9


class Ceiling:
    """Reports the first step whose training score is above the ceiling."""

    config_class = CeilingSettings
    name = "ceiling"

    def __init__(self, settings: CeilingSettings) -> None:
        self.settings = settings
        self.above = False

    def check(self, view: HealthView) -> list[Finding]:
        score = view.metrics.get("critic/score/mean", 0.0)
        began = score > self.settings.ceiling and not self.above
        self.above = score > self.settings.ceiling
        if not began:
            return []
        message = f"critic/score/mean {score} > {self.settings.ceiling}"
        return [Finding(self.name, "warning", "critic/score/mean", message, view.step, view.step)]


PLUGIN = types.SimpleNamespace(
    config_defaults=rlcore.hookimpl(lambda: CeilingSettings()),
    register_health_monitors=rlcore.hookimpl(
        lambda register: register("ceiling", Ceiling, spec=HealthMonitorSpec(reads=("critic/score/mean", "val-*")))
    ),
)


@pytest.fixture(autouse=True)
def without_builtin_monitors(monkeypatch: pytest.MonkeyPatch) -> None:
    """``RLCORE_DISABLE_PLUGINS`` names rlcore-plugin-health (before the test's plugin manager is made)."""
    disabled = os.environ.get("RLCORE_DISABLE_PLUGINS", "")
    monkeypatch.setenv("RLCORE_DISABLE_PLUGINS", ",".join(filter(None, [disabled, "rlcore-plugin-health"])))


@pytest.fixture
def ceiling(registered) -> Iterator[None]:
    with registered(PLUGIN, name="ceiling-plugin"):
        yield


def write_run(folder: Path, scores: list[float], tail: str = "", config: str | None = None) -> Path:
    """A run directory whose metrics.jsonl has a validation row (step 0) and one row per score."""
    folder.mkdir()
    rows = [{"step": 0, "val-core/x/reward/mean@1": 0.1}]
    rows += [{"step": step, "critic/score/mean": score} for step, score in enumerate(scores, start=1)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows) + tail)
    if config is not None:
        (folder / "config.yaml").write_text(config)
    return folder


def health(*args: str):
    return CliRunner().invoke(cli, ["health", *args])


def test_a_missing_metrics_file_is_one_line_naming_it(tmp_path: Path) -> None:
    result = health(str(tmp_path / "nowhere"))
    assert result.exit_code == 2
    assert result.output == f"error: metrics file {tmp_path / 'nowhere' / 'metrics.jsonl'} does not exist\n"


def test_a_broken_metrics_file_is_one_line_naming_the_line(tmp_path: Path, ceiling: None) -> None:
    run_dir = write_run(tmp_path / "run", [0.5], tail='{"step": 2, oops\n{"step": 3}\n')
    result = health(str(run_dir))
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    assert line.startswith(f"error: {run_dir / 'metrics.jsonl'}:3: not a JSON object")


def test_a_running_run_is_replayed_up_to_its_last_whole_row(tmp_path: Path, ceiling: None) -> None:
    """The defaults apply without a config.yaml; the half-written last row is skipped."""
    run_dir = write_run(tmp_path / "run", [0.5, 0.95, 0.97, 0.3], tail='{"step": 5, "critic/sc')
    result = health(str(run_dir))
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [
        "health: [warning] ceiling: critic/score/mean 0.95 > 0.9 (step 2)",
        f"1 finding in {run_dir / 'metrics.jsonl'} (4 steps; monitors: ceiling)",
    ]


def test_the_runs_config_then_the_overrides_set_the_thresholds(tmp_path: Path, ceiling: None) -> None:
    config = "trainer:\n  monitors:\n    ceiling:\n      enable: true\n      action: warn\n      ceiling: 0.99\n"
    run_dir = write_run(tmp_path / "run", [0.5, 0.95, 0.97], config=config)
    assert health(str(run_dir)).exit_code == 0
    result = health(str(run_dir), "trainer.monitors.ceiling.ceiling=0.96")
    assert result.exit_code == 1 and "critic/score/mean 0.97 > 0.96 (step 3)" in result.output


def test_no_enabled_monitor_is_said(tmp_path: Path, ceiling: None) -> None:
    run_dir = write_run(tmp_path / "run", [0.95])
    result = health(str(run_dir), "trainer.monitors.ceiling.enable=false")
    assert result.exit_code == 0
    assert result.output.startswith("no run-health monitor is enabled")


def test_a_key_of_the_runs_section_no_monitor_declares_names_the_runs_config(tmp_path: Path, ceiling: None) -> None:
    config = "trainer:\n  monitors:\n    ceiling:\n      ceilng: 0.5\n"
    run_dir = write_run(tmp_path / "run", [0.95], config=config)
    result = health(str(run_dir))
    assert result.exit_code == 2
    (line,) = result.output.splitlines()
    assert line.startswith(
        f"error: config file '{run_dir / 'config.yaml'} (its trainer.monitors section)': unknown config key "
        "'trainer.monitors.ceiling.ceilng'"
    ), line


def test_a_signal_the_run_never_logged_is_named(tmp_path: Path, ceiling: None) -> None:
    """The monitor reads critic/score/mean and val-*: a run that logged neither says so."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "actor/entropy": 1.0}\n')
    result = health(str(run_dir))
    assert result.exit_code == 0
    assert "health: ceiling reads critic/score/mean, val-*, which the run never logged" in result.output.splitlines()
    quiet = health(str(write_run(tmp_path / "logged", [0.5])))
    assert "never logged" not in quiet.output
