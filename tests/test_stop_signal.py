"""SIGTERM always ends a run: after at most ``trainer.stop_grace_s`` the step in progress is abandoned, and the
run writes ``summary.json`` and exits with 143 — even when the main thread is stuck in user code, and even when
that code blocks the signal so that no Python handler can run in the main thread, or ignores it. Real runs in
subprocesses, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rlcore_testkit.contracts.rewards import make_reward_batch
from rlcore_testkit.runs import make_tiny_task, tiny_overrides

from rlcore.config.sections.reward_model import RewardModelConfig
from rlcore.graceful_stop import StopRequest
from rlcore.reward.managers import NaiveRewardManager

STUCK_REWARD = """
import signal, time
from pathlib import Path

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if {mask}:
        signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGTERM, signal.SIGINT}})
    Path({marker!r}).touch()
    time.sleep(600)  # stuck: the step cannot finish
    return 0.0
"""


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_tiny_task(tmp_path_factory.mktemp("task"))


@pytest.mark.parametrize("mask", [False, True], ids=["stuck-in-sleep", "signals-blocked"])
def test_sigterm_ends_a_run_stuck_in_user_code_within_the_grace_period(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path], mask: bool
) -> None:
    marker = tmp_path / "scoring"
    reward = tmp_path / "stuck_reward.py"
    reward.write_text(STUCK_REWARD.format(mask=mask, marker=str(marker)))
    args = [
        *tiny_overrides(tmp_path, tiny_model_dir, task),
        f"custom_reward_function.path={reward}",
        "reward_model.scorer_timeout=0",  # inline: the scorer runs on the main thread
        "trainer.stop_grace_s=2",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlcore", "run", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 300
    while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert marker.exists(), proc.communicate()[0]
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=120)
    took = time.monotonic() - sent
    assert proc.returncode == 143, output
    assert "Traceback" not in output
    assert "SIGTERM received: finishing the current step (at most trainer.stop_grace_s=2 s)" in output or mask
    assert "did not end within trainer.stop_grace_s=2 s after SIGTERM: abandoning it" in output
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    status = json.loads((run_dir / "summary.json").read_text())["status"]
    if mask:  # no Python handler can run on the main thread: the watchdog ends the process itself
        assert f"(it is at {reward}:9, in compute_score): writing the summary and exiting with status 143" in output
        assert status == "interrupted by SIGTERM (the step in progress was abandoned)"
        assert took < 2 + 10 + 30
    else:
        assert status == "interrupted by SIGTERM"
        assert took < 2 + 30
    assert "stopped: the step in progress was abandoned" in output


# ------------------------------------------------------------------ user code cannot take the stop handling away
def ignores_sigterm(data_source, solution_str, ground_truth, extra_info=None):
    """Ignores SIGTERM and SIGINT; the first call then gets a SIGTERM (a scheduler ending the job)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    if not getattr(ignores_sigterm, "signalled", False):
        ignores_sigterm.signalled = True  # type: ignore[attr-defined]
        os.kill(os.getpid(), signal.SIGTERM)
    return 1.0


def test_a_scorer_ignoring_sigterm_does_not_take_it_from_the_run(tiny_tokenizer, capsys) -> None:
    """Before: the handlers stayed SIG_IGN and a lambda, the SIGTERM was lost and the run trained to its end."""
    batch, _ = make_reward_batch(tiny_tokenizer)
    manager = NaiveRewardManager(tiny_tokenizer, ignores_sigterm, RewardModelConfig(scorer_timeout=0))
    with StopRequest() as stop:
        manager(batch)
        assert stop.requested and stop.signum == signal.SIGTERM, "the SIGTERM sent during the call was seen"
        assert signal.getsignal(signal.SIGTERM) == stop._handle and signal.getsignal(signal.SIGINT) == stop._handle
        manager(batch)
    err = capsys.readouterr().err
    warning = (
        "warning: the reward scorer (data_source 'contract') tried to change the run's stop handling (SIGTERM handler "
        "set to SIG_IGN (refused); SIGINT handler set to ignores_sigterm.<locals>.<lambda> (refused)); rlcore kept "
        "the run's SIGINT/SIGTERM handling"
    )
    assert err.count(warning) == 1, err


def changes_the_handling_behind_signal_signal(data_source, solution_str, ground_truth, extra_info=None):
    """Changes the handler through ``_signal``, the wake-up fd and the signal mask."""
    import _signal

    _signal.signal(signal.SIGTERM, _signal.SIG_IGN)
    signal.set_wakeup_fd(-1)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    return 1.0


def test_stop_handling_changed_behind_signal_signal_is_put_back(tiny_tokenizer, capsys) -> None:
    batch, _ = make_reward_batch(tiny_tokenizer, ["a"])
    with StopRequest() as stop:
        wakeup = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(wakeup)
        result = NaiveRewardManager(
            tiny_tokenizer, changes_the_handling_behind_signal_signal, RewardModelConfig(scorer_timeout=0)
        )(batch)
        assert result.token_level_scores.sum().item() == 1.0, "the scorer ran to its end"
        assert signal.getsignal(signal.SIGTERM) == stop._handle
        assert signal.set_wakeup_fd(wakeup) == wakeup, "the watchdog's wake-up fd is back"
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert (
        "(SIGTERM handler replaced by SIG_IGN; signal wake-up fd set to -1; SIGTERM blocked); rlcore kept"
        in capsys.readouterr().err
    )


IGNORING_REWARD = """
import signal, time
from pathlib import Path

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    marker = Path({marker!r})
    if not marker.exists():
        marker.touch()
        time.sleep(3)  # the SIGTERM comes now
    return 0.5
"""


def test_sigterm_stops_a_run_whose_scorer_ignores_it(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    """Before: the SIGTERM was ignored and the run trained its 4 steps, exit status 0."""
    marker = tmp_path / "scoring"
    reward = tmp_path / "ignoring_reward.py"
    reward.write_text(IGNORING_REWARD.format(marker=str(marker)))
    args = [
        *tiny_overrides(tmp_path, tiny_model_dir, task),
        f"custom_reward_function.path={reward}",
        "reward_model.scorer_timeout=0",
        "trainer.total_training_steps=4",
        "trainer.test_freq=-1",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlcore", "run", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 300
    while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert marker.exists(), proc.communicate()[0]
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 143, output
    assert "SIGTERM handler set to SIG_IGN (refused)" in output
    assert "SIGTERM received: finishing the current step" in output
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted by SIGTERM"
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 1, "stopped after the step in progress"


def test_the_watchdog_still_ends_a_stuck_run_that_holds_over_a_thousand_descriptors() -> None:
    """The watchdog's wake-up pipe gets a descriptor numbered 1024 or more in a process that opened many files
    (``select`` refuses those): the grace period still ends a run whose main thread is stuck."""
    code = (
        "import os, signal, threading, time\nfrom rlcore.graceful_stop import StopRequest\n"
        "held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]\n"
        "with StopRequest(grace_s=0.5):\n"
        "    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()\n"
        "    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})  # no handler runs here\n"
        "    time.sleep(20)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 143, done.stderr
