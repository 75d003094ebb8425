"""Run health in real runs of the tiny task: monitors registered by a test plugin fire at a given step, and the
run acts as their ``action`` says — ``warn`` (metric rows, a console line, ``summary.json``), ``checkpoint``
(one saved at that step), ``stop`` (a checkpoint, then a non-zero exit naming the finding); a monitor that
raises is reported with its plugin and disabled, never ending the run; ``rlcore health`` on the stopped
run's directory finds the same; a bad or unknown ``trainer.monitors`` key is refused naming it. The built-in
monitors (rlcore-plugin-health) are switched off, so that only the test plugin's monitors speak."""

from __future__ import annotations

import dataclasses
import json
import os
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner
from rlcore_testkit.pytest_plugin import registered
from rlcore_testkit.runs import dry_run, make_tiny_task, tiny_overrides, tiny_run

import rlcore
from rlcore.api import Finding, HealthMonitorSpec, HealthView, MonitorSettings
from rlcore.cli import cli
from rlcore.plugins import make_plugin_manager, set_plugin_manager
from rlcore.tracking.sinks import read_metrics

PLUGIN = "health-test"


@dataclasses.dataclass(frozen=True)
class AtStep(MonitorSettings):
    """A test monitor's settings: the step it reports at and the step it raises at."""

    #: the step the monitor reports at (0: never)
    at_step: int = 0
    #: the step the monitor raises at (0: never)
    raise_at: int = 0


@dataclasses.dataclass(frozen=True)
class FiresSettings(AtStep):
    PATH = "trainer.monitors.fires"


@dataclasses.dataclass(frozen=True)
class SavesSettings(AtStep):
    PATH = "trainer.monitors.saves"


@dataclasses.dataclass(frozen=True)
class RaisesSettings(AtStep):
    PATH = "trainer.monitors.raises"


class AtStepMonitor:
    """Reports the step's training score at ``at_step`` (with what it saw: samples, history), raises at
    ``raise_at``."""

    config_class: ClassVar[type[AtStep]] = AtStep
    name = ""

    def __init__(self, settings: AtStep) -> None:
        self.settings = settings

    def check(self, view: HealthView) -> list[Finding]:
        """A critical finding at ``at_step``."""
        if view.step == self.settings.raise_at:
            raise RuntimeError("boom")
        if view.step != self.settings.at_step:
            return []
        first = view.samples[0].response if view.samples else ""
        score = view.metrics["critic/score/mean"]
        return [
            Finding(
                monitor=self.name,
                severity="critical",
                signal="critic/score/mean",
                message=f"critic/score/mean {score:.3f} at step {view.step}; first sample {first!r}",
                began_at=view.step,
                step=view.step,
                values={"samples": float(len(view.samples)), "history": float(len(view.history))},
            )
        ]


class Fires(AtStepMonitor):
    config_class = FiresSettings
    name = "fires"


class Saves(AtStepMonitor):
    config_class = SavesSettings
    name = "saves"


class Raises(AtStepMonitor):
    config_class = RaisesSettings
    name = "raises"


def config_defaults() -> list[MonitorSettings]:
    return [FiresSettings(), SavesSettings(), RaisesSettings()]


def register_health_monitors(register) -> None:
    register("fires", Fires, spec=HealthMonitorSpec(reads=("critic/score/mean",), samples=2))
    register("saves", Saves)
    register("raises", Raises)


HEALTH_PLUGIN = types.SimpleNamespace(
    config_defaults=rlcore.hookimpl(config_defaults), register_health_monitors=rlcore.hookimpl(register_health_monitors)
)


@pytest.fixture(scope="module")
def with_monitors() -> Iterator[None]:
    """The test plugin's monitors in a fresh process-wide plugin manager (without rlcore-plugin-health's), for the
    module."""
    disabled = os.environ.get("RLCORE_DISABLE_PLUGINS")
    os.environ["RLCORE_DISABLE_PLUGINS"] = ",".join(filter(None, [disabled, "rlcore-plugin-health"]))
    previous = set_plugin_manager(make_plugin_manager())
    try:
        with registered(HEALTH_PLUGIN, name=PLUGIN):
            yield
    finally:
        set_plugin_manager(previous)
        if disabled is None:
            del os.environ["RLCORE_DISABLE_PLUGINS"]
        else:
            os.environ["RLCORE_DISABLE_PLUGINS"] = disabled


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_tiny_task(tmp_path_factory.mktemp("task"))


@pytest.fixture(scope="module")
def warned_run(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, task: dict[str, Path], with_monitors: None
) -> dict[str, Any]:
    """Two steps: ``fires`` warns at step 1, ``saves`` checkpoints at step 1, ``raises`` raises at step 1."""
    import contextlib
    import io

    tmp = tmp_path_factory.mktemp("warned")
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        last, run_dir = tiny_run(
            tmp,
            tiny_model_dir,
            task,
            "trainer.monitors.fires.at_step=1",
            "trainer.monitors.saves.at_step=1",
            "trainer.monitors.saves.action=checkpoint",
            "trainer.monitors.raises.raise_at=1",
        )
    return {"tmp": tmp, "run_dir": run_dir, "output": output.getvalue(), "last": last}


def test_warn_writes_metric_rows_a_console_line_and_the_summary(warned_run: dict[str, Any]) -> None:
    rows = {row["step"]: row for row in read_metrics(warned_run["run_dir"])}
    assert rows[1]["health/fires/finding"] == 1.0 and rows[1]["health/fires/began_at"] == 1.0
    assert not [key for key in rows[2] if key.startswith("health/")]
    summary = json.loads((warned_run["run_dir"] / "summary.json").read_text())
    assert summary["status"] == "completed"
    fires = [row for row in summary["health"] if row["monitor"] == "fires"]
    assert [(row["step"], row["began_at"], row["severity"], row["action"]) for row in fires] == [
        (1, 1, "critical", "warn")
    ]
    line = f"health: [critical] fires: {fires[0]['message']}"
    assert line in warned_run["output"].splitlines()
    assert "health:        2 findings" in warned_run["output"]
    # the monitor saw the validation before training and step 1, and the two samples its spec asks for
    assert fires[0]["values"] == {"samples": 2.0, "history": float(len([s for s in rows if s <= 1]))}
    assert "first sample ''" not in fires[0]["message"]


def test_checkpoint_action_saves_the_step(warned_run: dict[str, Any]) -> None:
    """``trainer.save_freq`` is off (-1): the only checkpoint is the one the finding asked for."""
    saved = sorted(path.name for path in (warned_run["tmp"] / "ckpt").glob("global_step_*"))
    assert saved == ["global_step_1"]
    rows = read_metrics(warned_run["run_dir"])
    assert [row["step"] for row in rows if "health/saves/finding" in row] == [1]


def test_a_raising_monitor_is_reported_and_disabled_and_the_run_goes_on(warned_run: dict[str, Any]) -> None:
    (line,) = [line for line in warned_run["output"].splitlines() if "'raises'" in line]
    assert line.startswith(f"health: monitor 'raises' ({PLUGIN}) raised at step 1: RuntimeError: boom (")
    assert line.endswith(
        "it is disabled for the rest of the run (trainer.monitors.raises.enable=false switches it off)"
    )
    assert warned_run["last"]["training/global_step"] == 2


@pytest.fixture(scope="module")
def stopped_run(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, task: dict[str, Path], with_monitors: None
) -> dict[str, Any]:
    """``rlcore run`` of three steps whose ``fires`` monitor stops the run at step 1 (generations dumped)."""
    tmp = tmp_path_factory.mktemp("stopped")
    args = [
        *tiny_overrides(tmp, tiny_model_dir, task),
        "trainer.total_training_steps=3",
        "trainer.monitors.fires.at_step=1",
        "trainer.monitors.fires.action=stop",
        f"trainer.rollout_data_dir={tmp / 'dumps'}",
    ]
    result = CliRunner().invoke(cli, ["run", *args])
    (run_dir,) = (tmp / "runs").glob("*/*")
    return {"tmp": tmp, "run_dir": run_dir, "result": result}


def test_stop_saves_then_ends_with_a_non_zero_status_naming_the_finding(stopped_run: dict[str, Any]) -> None:
    result = stopped_run["result"]
    assert result.exit_code == 2, result.output
    summary = json.loads((stopped_run["run_dir"] / "summary.json").read_text())
    (finding,) = summary["health"]
    named = f"run health stopped the run at step 1: [critical] fires: {finding['message']}"
    assert f"error: {named} (trainer.monitors.fires.action=stop; the checkpoint of step 1 is saved)" in result.output
    assert summary["status"].startswith(f"stopped: {named}")
    assert [row["step"] for row in read_metrics(stopped_run["run_dir"])][-1] == 1
    assert sorted(p.name for p in (stopped_run["tmp"] / "ckpt").glob("global_step_*")) == ["global_step_1"]


def test_rlcore_health_replays_the_run_and_finds_the_same(stopped_run: dict[str, Any]) -> None:
    """With the run's config.yaml settings and its dumped generations, the replay prints the run's finding,
    word for word, and exits 1."""
    summary = json.loads((stopped_run["run_dir"] / "summary.json").read_text())
    (finding,) = summary["health"]
    result = CliRunner().invoke(cli, ["health", str(stopped_run["run_dir"])])
    assert result.exit_code == 1, result.output
    assert f"health: [critical] fires: {finding['message']} (step 1)" in result.output.splitlines()
    assert f"1 finding in {stopped_run['run_dir'] / 'metrics.jsonl'} (1 step; monitors: fires, raises, saves)" in (
        result.output
    )


def test_an_override_switches_a_replayed_monitor_off(stopped_run: dict[str, Any]) -> None:
    result = CliRunner().invoke(cli, ["health", str(stopped_run["run_dir"]), "trainer.monitors.fires.enable=false"])
    assert result.exit_code == 0, result.output
    assert "no findings in" in result.output


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("trainer.monitors.fires.bogus=1", "unknown config key 'trainer.monitors.fires.bogus'"),
        ("+trainer.monitors.nosuch.enable=false", "trainer.monitors.nosuch: no health monitor named 'nosuch'"),
        ("trainer.monitors.fires.action=halt", "trainer.monitors.fires.action must be one of warn, checkpoint, stop"),
    ],
)
def test_a_bad_monitor_key_is_refused_naming_it(override: str, says: str, with_monitors: None) -> None:
    result = dry_run(override)
    assert result.exit_code == 2, result.output
    assert says in result.output


def test_the_dry_run_names_the_monitors_by_action(with_monitors: None) -> None:
    result = dry_run("trainer.monitors.saves.action=checkpoint", "trainer.monitors.raises.enable=false")
    assert result.exit_code == 0, result.output
    assert "run health: 2 monitors (warn: fires; checkpoint: saves)" in result.output.splitlines()
