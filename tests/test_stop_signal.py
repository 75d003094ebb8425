"""SIGTERM always ends a run: after at most ``trainer.stop_grace_s`` the step in progress is abandoned, and the
run writes ``summary.json`` and exits with 143 — even when the main thread is stuck in user code, and even when
that code blocks the signal so that no Python handler can run in the main thread. Real runs in subprocesses."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlcore.testing.runs import make_tiny_task, tiny_overrides

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
