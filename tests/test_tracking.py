"""Tests of rlcore.tracking: JSONL and console sinks, the tracker set, build_trackers, the progress bar,
the reward plot and the stage timer."""

from __future__ import annotations

import io
import json
import logging
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from omegaconf import OmegaConf
from rlcore_testkit.contracts.tracker import TrackerContract

from rlcore.errors import RLCoreError
from rlcore.registry import UnknownComponentError
from rlcore.tracking.progress import ProgressBar, active_console
from rlcore.tracking.sinks import (
    ConsoleTracker,
    JsonlTracker,
    TrackerSet,
    build_trackers,
    format_metrics_line,
    format_value,
    logger_names,
    read_metrics,
)
from rlcore.tracking.timer import StageTimer


def make_config(logger: Any = ("console",)) -> Any:
    """A small config with the trainer keys the trackers read."""
    return OmegaConf.create({"trainer": {"project_name": "proj", "experiment_name": "exp", "logger": logger}})


def jsonl(run_dir: Path) -> JsonlTracker:
    """A JSONL tracker writing to ``run_dir``."""
    return JsonlTracker(project="proj", experiment="exp", config=make_config(), run_dir=run_dir)


# ------------------------------------------------------------------------------------------ JSONL
def test_jsonl_written_line_by_line_and_read_back(tmp_path: Path) -> None:
    tracker = jsonl(tmp_path)
    tracker.log({"critic/score/mean": 0.5, "actor/pg_loss": float("nan")}, 1)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 1  # flushed before the next step and before finish()
    tracker.log(
        {
            "critic/score/mean": np.float32(0.75),
            "training/global_step": np.int64(2),
            "perf/inf": float("inf"),
            "flag": True,
            "one_element": np.array([1.5]),
        },
        2,
    )
    tracker.finish()
    for line in (tmp_path / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"invalid JSON constant {c}"))
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert records == [
        {"step": 1, "critic/score/mean": 0.5, "actor/pg_loss": None},
        {
            "step": 2,
            "critic/score/mean": 0.75,
            "training/global_step": 2,
            "perf/inf": None,
            "flag": 1,
            "one_element": 1.5,
        },
    ]
    assert type(records[1]["critic/score/mean"]) is float
    assert read_metrics(tmp_path) == records  # a run directory works too


def test_jsonl_torch_scalars(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    tracker = jsonl(tmp_path)
    tracker.log({"a": torch.tensor(0.25), "b": torch.tensor(3), "c": torch.tensor(float("nan"))}, 7)
    tracker.finish()
    assert read_metrics(tmp_path) == [{"step": 7, "a": 0.25, "b": 3, "c": None}]


def test_jsonl_killed_mid_run_keeps_logged_steps(tmp_path: Path) -> None:
    tracker = jsonl(tmp_path)
    for step in (1, 2, 3):
        tracker.log({"critic/score/mean": step / 10}, step)
    # no finish(): the process is killed here; read the file from the outside
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3]
    assert records[2]["critic/score/mean"] == pytest.approx(0.3)


def test_jsonl_appends_across_trackers_and_skips_truncated_line(tmp_path: Path) -> None:
    first = jsonl(tmp_path)
    first.log({"x": 1.0}, 1)
    first.finish()
    second = jsonl(tmp_path)  # a resumed run
    second.log({"x": 2.0}, 2)
    second.finish()
    with (tmp_path / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 3, "x"')  # a crash in the middle of a write
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]


def test_read_metrics_errors(tmp_path: Path) -> None:
    with pytest.raises(RLCoreError, match="does not exist"):
        read_metrics(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(RLCoreError, match=r"bad.jsonl:2"):
        read_metrics(bad)


def test_jsonl_log_table(tmp_path: Path) -> None:
    tracker = jsonl(tmp_path)
    tracker.log_table("val/generations", [{"output": "2", "score": np.float64(1.0)}], 4)
    rows = [json.loads(line) for line in (tmp_path / "tables" / "val_generations.jsonl").read_text().splitlines()]
    assert rows == [{"step": 4, "output": "2", "score": 1.0}]


# ---------------------------------------------------------------------------------------- console
def test_format_value() -> None:
    assert format_value(3) == "3"
    assert format_value(0.5) == "0.5"
    assert format_value(2.0) == "2"
    assert format_value(0.0) == "0"
    assert format_value(12.345678) == "12.3457"
    assert format_value(0.0123456) == "0.01235"
    assert format_value(1.23456e-5) == "1.235e-05"
    assert format_value(float("nan")) == "nan"
    assert format_value(np.float32(0.25)) == "0.25"


def test_console_line_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tracker = ConsoleTracker(project="proj", experiment="exp", config=make_config(), run_dir=tmp_path)
    tracker.log({"response_length/mean": 37.5, "actor/pg_loss": -0.0123456, "critic/score/mean": 0.5}, 3)
    tracker.finish()
    out = capsys.readouterr().out
    assert out == "step:3 - actor/pg_loss:-0.01235 - critic/score/mean:0.5 - response_length/mean:37.5\n"
    assert format_metrics_line({}, 0) == "step:0"


def test_console_prints_through_live_progress_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=60, force_terminal=True, color_system=None)
    tracker = ConsoleTracker(project="proj", experiment="exp", config=make_config(), run_dir=tmp_path)
    long_metrics = {f"metric/number_{i}": i / 3 for i in range(8)}
    with ProgressBar(2, console=console) as bar:
        assert active_console() is console and bar.console is console
        tracker.log(long_metrics, 1)
        bar.update(1, {"critic/score/mean": 0.5})
    assert active_console() is None
    assert capsys.readouterr().out == ""
    assert format_metrics_line(long_metrics, 1) in buffer.getvalue()  # not wrapped at the console width


# ------------------------------------------------------------------------------------ progress bar
STEP_LINE = re.compile(
    r"^step (\d+)/(\d+), (?:[\w: /@.-]+ -?[\d.e+-]+, )*elapsed \d+(?:s|m\d\ds)(?:, ETA \d+(?:s|m\d\ds))?$"
)


def test_progress_in_a_log_prints_one_short_line_per_step() -> None:
    """Not a terminal: one ``step N/M, reward R, val V, elapsed T, ETA T`` line per step (no ETA after the
    last), the long phases announced on their own lines, nothing interactive."""
    from rich.console import Console

    buffer = io.StringIO()
    metrics = {
        "critic/score/mean": 0.5,
        "response_length/mean": 40.0,
        "actor/pg_loss": 0.01,
        "val-core/openai/gsm8k/reward/mean@1": 0.6,
    }
    with ProgressBar(3, console=Console(file=buffer, width=200)) as bar:
        assert bar.console is None and active_console() is None  # trackers print plain lines
        for step in (1, 2, 3):
            if step == 2:
                with bar.phase("validating after step 2"):
                    pass
            bar.update(step, metrics if step == 2 else {"critic/score/mean": step / 4})
    lines = buffer.getvalue().splitlines()
    assert lines[0].startswith("step 1/3, reward 0.25, elapsed ") and ", ETA " in lines[0]
    assert lines[1] == "validating after step 2 ..."
    assert lines[2].startswith("step 2/3, reward 0.5, val 0.6, elapsed ")
    assert lines[3].startswith("step 3/3, reward 0.75, val 0.6, elapsed ") and "ETA" not in lines[3]
    assert len(lines) == 4 and all(STEP_LINE.match(line) for line in (lines[0], lines[2], lines[3])), lines
    assert "\x1b" not in buffer.getvalue() and "━" not in buffer.getvalue()


def last_frame(output: str) -> str:
    """The last line a live progress display drew (frames are separated by carriage returns and newlines),
    without ANSI control sequences."""
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output)
    frames = [frame for frame in re.split(r"[\r\n]", plain) if frame.strip()]
    return frames[-1]


@pytest.mark.parametrize("width", [80, 120])
def test_progress_in_a_terminal_puts_bar_count_and_eta_first(width: int) -> None:
    """In a terminal the bar, ``N/M``, elapsed and ETA come first and stay visible; the metrics follow, cut
    to the width. The bar is a quarter of the width (20 columns at 80, 30 at 120)."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=True, color_system=None)
    metrics = {f"val-core/source_{i}/reward/mean@1": i / 7 for i in range(6)}
    metrics.update({"critic/score/mean": 0.421875, "response_length/mean": 3.125, "actor/pg_loss": -0.0123})
    with ProgressBar(40, console=console) as bar:
        for step in range(1, 13):
            bar.update(step, metrics)
        with bar.phase("validating after step 12"):
            assert "validating after step 12..." in last_frame(buffer.getvalue())
    frame = last_frame(buffer.getvalue())
    assert len(frame) <= width, frame
    match = re.match(r"^([━╸╺ ]+) 12/40 (\d+:\d\d:\d\d) eta (\S+) (score/mean:0.4219 .*)$", frame)
    assert match, frame
    assert len(match.group(1)) == width // 4
    assert match.group(4).endswith("…")  # the metrics do not fit: cut, never wrapped


def test_progress_in_a_pseudo_terminal_draws_the_bar() -> None:
    """A real process whose stdout is a pseudo-terminal 80 columns wide: the bar's default console finds the
    terminal and its width by itself and draws the live line within it."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    script = (
        "from rlcore.tracking.progress import ProgressBar\n"
        "with ProgressBar(40) as bar:\n"
        "    for step in range(1, 6):\n"
        "        bar.update(step, {'critic/score/mean': 0.5, 'actor/pg_loss': 0.01,"
        " **{f'val-core/s{i}/reward/mean@1': 0.25 for i in range(9)}})\n"
    )
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TERM", "NO_COLOR")}
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=follower, stderr=follower, env={**env, "TERM": "xterm"}
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the follower side closed
            break
        if not data:
            break
        chunks.append(data)
    assert process.wait(timeout=60) == 0
    os.close(leader)
    frame = last_frame(b"".join(chunks).decode("utf-8", "replace"))
    assert re.match(r"^[━╸╺ ]{20} +5/40 \d+:\d\d:\d\d eta \S+ score/mean:0.5 ", frame), frame
    assert len(frame) <= 80 and frame.endswith("…"), frame


def test_progress_bar_disabled_does_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with ProgressBar(5, enabled=False) as bar:
        bar.update(1, {"critic/score/mean": 1.0})
        assert bar.console is None and active_console() is None
    assert capsys.readouterr().out == ""


# ------------------------------------------------------------------------------------- tracker set
class Recorder:
    """A duck-typed tracker that records its calls."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.finished = 0

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.steps.append(step)

    def finish(self) -> None:
        self.finished += 1


class Broken:
    """A tracker whose log always raises."""

    def __init__(self) -> None:
        self.calls = 0

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.calls += 1
        raise ConnectionError("server unreachable")

    def finish(self) -> None:
        raise AssertionError("a disabled tracker must not be finished")


def test_tracker_set_isolates_a_failing_tracker(caplog: pytest.LogCaptureFixture) -> None:
    broken, good = Broken(), Recorder()
    trackers = TrackerSet({"wandb": broken, "console": good})
    with caplog.at_level(logging.WARNING, logger="rlcore.tracking.sinks"):
        with trackers:
            for step in (1, 2, 3):
                trackers.log({"x": 1.0}, step)
            trackers.log_table("t", [{"a": 1}], 3)  # Recorder has no log_table: skipped
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "'wandb'" in warnings[0].getMessage() and "server unreachable" in warnings[0].getMessage()
    assert broken.calls == 1
    assert good.steps == [1, 2, 3] and good.finished == 1
    assert trackers.active == ["console"] and "ConnectionError" in trackers.disabled["wandb"]
    trackers.finish()  # idempotent
    assert good.finished == 1


# --------------------------------------------------------------------------------- build_trackers
def test_logger_names() -> None:
    assert logger_names(make_config(["console", "wandb"])) == ["console", "wandb", "jsonl"]
    assert logger_names(make_config("console")) == ["console", "jsonl"]
    assert logger_names(make_config(None)) == ["jsonl"]
    assert logger_names(make_config(["jsonl", "console", "console"])) == ["jsonl", "console"]


def test_build_trackers(plugin_manager: Any, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    trackers = build_trackers(make_config("console"), run_dir, plugin_manager.registry)
    assert trackers.names == ["console", "jsonl"]
    assert isinstance(trackers["console"], ConsoleTracker)
    assert trackers["jsonl"].project == "proj" and trackers["jsonl"].experiment == "exp"
    trackers.log({"critic/score/mean": 1.0}, 1)
    trackers.finish()
    assert read_metrics(run_dir) == [{"step": 1, "critic/score/mean": 1.0}]


def test_build_trackers_unknown_name_lists_known(plugin_manager: Any, tmp_path: Path) -> None:
    with pytest.raises(UnknownComponentError) as info:
        build_trackers(make_config(["console", "consol_e"]), tmp_path / "run", plugin_manager.registry)
    message = str(info.value)
    assert "consol_e" in message and "console" in message and "jsonl" in message
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # nothing was constructed


# ------------------------------------------------------------------------------------------ timer
def test_stage_timer() -> None:
    timer = StageTimer()
    with timer("gen"):
        time.sleep(0.01)
    with timer("gen"):
        time.sleep(0.01)
    with pytest.raises(ValueError), timer("reward"):
        raise ValueError("boom")
    times = timer.pop_all()
    assert set(times) == {"gen", "reward"}
    assert times["gen"] >= 0.02 and times["reward"] >= 0.0
    assert timer.pop_all() == {}


# -------------------------------------------------------------------------------------- contracts
class TestConsoleTrackerContract(TrackerContract):
    """The built-in console tracker passes the tracker contract."""

    component_name = "console"


class TestJsonlTrackerContract(TrackerContract):
    """The built-in JSONL tracker passes the tracker contract and writes every logged step."""

    component_name = "jsonl"

    def read_back(self, run_dir: Path) -> None:
        """Every logged step is in metrics.jsonl, NaN as null."""
        records = read_metrics(run_dir / "metrics.jsonl")
        assert [r["step"] for r in records] == [step for step, _ in self.LOGGED_STEPS]
        assert records[1]["actor/pg_loss"] is None
        assert records[1]["training/global_step"] == 2
