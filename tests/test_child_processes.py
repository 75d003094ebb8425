"""What user code starts in the controller ends with the run and never holds the run's output: a helper left
running by an inline scorer (inheriting stdout, in a session of its own, or a daemon that double-forked) is
recorded, warned about and killed when the run ends; the run's own processes are not touched; a child started
in a call writes to a pipe the controller copies out, not to the run's stdout, so ``rlcore run | cat`` ends
when the run ends. Real processes throughout."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from rlcore_testkit.contracts.rewards import make_reward_batch
from rlcore_testkit.runs import make_tiny_task, tiny_overrides

from rlcore.child_processes import kill_leftovers
from rlcore.cli import cli
from rlcore.config.sections.reward_model import RewardModelConfig
from rlcore.reward.managers import NaiveRewardManager


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _wait_dead(pids: list[int], seconds: float = 10.0) -> list[int]:
    """The ``pids`` still alive after waiting up to ``seconds`` for them to die."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    return [pid for pid in pids if _alive(pid)]


def starts_helpers(data_source, solution_str, ground_truth, extra_info=None):
    """On sample '1': starts one helper that inherits stdout and one in a session of its own, prints, and writes
    their pids into the folder ``data_source``."""
    if ground_truth == "1":
        inherits = subprocess.Popen(["sleep", "301"])
        session = subprocess.Popen(["sleep", "302"], start_new_session=True)
        Path(data_source, "pids").write_text(f"{inherits.pid} {session.pid}")
        print("the scorer speaks", flush=True)
    return 1.0


def test_helpers_an_inline_scorer_leaves_running_are_killed_with_the_run(tiny_tokenizer, tmp_path, caplog) -> None:
    """Before: both helpers outlived the run (the one in its own session escaped every process-group kill)."""
    outside = subprocess.Popen(["sleep", "303"])  # the run's own child, started outside user code
    batch, _ = make_reward_batch(tiny_tokenizer, data_source=str(tmp_path))
    try:
        with caplog.at_level(logging.WARNING, logger="rlcore.child_processes"):
            NaiveRewardManager(tiny_tokenizer, starts_helpers, RewardModelConfig(scorer_timeout=0))(batch)
            inherits, session = (int(pid) for pid in (tmp_path / "pids").read_text().split())
            assert _alive(inherits) and _alive(session), "running while the run goes on"
            killed = kill_leftovers()
        assert _wait_dead([inherits, session]) == []
        assert _alive(outside.pid), "a process the run started itself is not user code's"
    finally:
        outside.kill()
        outside.wait()
    label = f"the reward scorer (data_source {str(tmp_path)!r})"
    assert killed == [
        f"process {inherits} (sleep 301), started by {label}",
        f"process {session} (sleep 302), started by {label}",
    ]
    messages = [record.getMessage() for record in caplog.records]
    assert messages[0] == (
        f"{label} left process {inherits} (sleep 301), process {session} (sleep 302) running after its call; rlcore "
        "kills what user code leaves running when the run ends"
    )
    assert messages[1].startswith("the run ended: killed 2 process(es) that user code left running: ")
    assert kill_leftovers() == [], "each is killed once"


def test_a_child_of_an_inline_scorer_does_not_get_the_runs_output(tiny_tokenizer, tmp_path, capfd) -> None:
    """The scorer's own print reaches the run's stdout, in order; its child's fd 1 is a pipe of the controller's,
    not the run's stdout. Before: the child held the run's stdout (a pipeline reading it waited for the child)."""
    batch, _ = make_reward_batch(tiny_tokenizer, ["a"], ground_truths=["1"], data_source=str(tmp_path))
    print("before the call", flush=True)
    NaiveRewardManager(tiny_tokenizer, starts_helpers, RewardModelConfig(scorer_timeout=0))(batch)
    print("after the call", flush=True)
    inherits, session = (int(pid) for pid in (tmp_path / "pids").read_text().split())
    try:
        assert os.readlink(f"/proc/{inherits}/fd/1") != os.readlink("/proc/self/fd/1")
        assert os.readlink(f"/proc/{inherits}/fd/2") != os.readlink("/proc/self/fd/2")
    finally:
        kill_leftovers()
    assert capfd.readouterr().out == "before the call\nthe scorer speaks\nafter the call\n"


SUBREAPER = """
import os, subprocess, time
from pathlib import Path
from rlcore.child_processes import become_subreaper, kill_leftovers
from rlcore.usercode import user_call

assert become_subreaper()
with user_call("the daemonising scorer"):
    # the shell forks a child that starts a new session and exits: its child is an orphan
    subprocess.run(["sh", "-c", "setsid sh -c 'echo $$ > {pidfile}; exec sleep 304' &"], check=True)
    while not Path({pidfile!r}).exists() or not Path({pidfile!r}).read_text().strip():
        time.sleep(0.01)
daemon = int(Path({pidfile!r}).read_text())
while Path(f"/proc/{{daemon}}/comm").read_text().strip() != "sleep":  # the pid is written before the exec
    time.sleep(0.01)
print(daemon, os.getppid() != os.getpid(), flush=True)
print(kill_leftovers(), flush=True)
"""


def test_a_daemon_that_double_forks_is_found_through_the_subreaper(tmp_path: Path) -> None:
    pidfile = tmp_path / "daemon.pid"
    code = SUBREAPER.format(pidfile=str(pidfile))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    daemon = int(proc.stdout.split()[0])
    assert f"process {daemon} (sleep 304), started by the daemonising scorer" in proc.stdout
    assert _wait_dead([daemon]) == []


TERMINAL = """
import os, pty, subprocess
from rlcore.child_processes import kill_leftovers
from rlcore.cli import cli
from rlcore.usercode import user_call

master, terminal = pty.openpty()
os.dup2(terminal, 1)
with user_call("the scorer"):
    child = subprocess.Popen(["sleep", "309"], stderr=subprocess.DEVNULL)
    inside = os.readlink("/proc/self/fd/1")
line = f"{{inside}} {{os.readlink(f'/proc/{{child.pid}}/fd/1')}} {{os.ttyname(terminal)}}"
kill_leftovers()
os.write(2, line.encode())
"""


def test_a_terminal_is_left_as_it_is() -> None:
    """Nobody waits for a terminal's end, and ``breakpoint()`` in an inline scorer keeps its line editing."""
    proc = subprocess.run([sys.executable, "-c", TERMINAL.format()], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    inside, child, terminal = proc.stderr.split()[-3:]
    assert inside == child == terminal


# ------------------------------------------------------------------ a real run, piped
@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_tiny_task(tmp_path_factory.mktemp("task"))


HELPER_REWARD = """
import subprocess
from pathlib import Path

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    pids = Path({pids!r})
    if not pids.exists():
        inherits = subprocess.Popen(["sleep", "{seconds}"])  # holds the run's stdout (before)
        session = subprocess.Popen(["sleep", "{seconds}.5"], start_new_session=True)  # outside the run's group
        pids.write_text(f"{{inherits.pid}} {{session.pid}}")
    return 0.5
"""


def test_rlcore_run_piped_ends_with_the_run_and_kills_what_its_scorer_left(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    """``rlcore run ... | cat``: before, the pipe reached EOF only when the scorer's helper ended (about 120 s
    after the run) and the helper in its own session outlived the run."""
    pids = tmp_path / "helper.pids"
    reward = tmp_path / "helper_reward.py"
    reward.write_text(HELPER_REWARD.format(pids=str(pids), seconds=120))
    args = [
        *tiny_overrides(tmp_path, tiny_model_dir, task),
        f"custom_reward_function.path={reward}",
        "reward_model.scorer_timeout=0",
        "trainer.test_freq=-1",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlcore", "run", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    exited: list[float] = []
    waiter = threading.Thread(target=lambda: exited.append((proc.wait(), time.monotonic())[1]), daemon=True)
    waiter.start()
    assert proc.stdout is not None
    output = proc.stdout.read().decode()  # to EOF, as `| cat` reads
    eof = time.monotonic()
    waiter.join(300)
    assert proc.returncode == 0, output
    assert eof - exited[0] < 30, f"the output pipe stayed open {eof - exited[0]:.0f} s after the run ended"
    inherits, session = (int(pid) for pid in pids.read_text().split())
    assert _wait_dead([inherits, session]) == [], "the helpers ended with the run"
    assert "killed 2 process(es) that user code left running" in output and f"process {session} (sleep 120.5)" in output
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"


def test_the_run_ends_the_helpers_when_it_fails(tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]) -> None:
    """However the run ends: here a scorer error that stops it (the helper started at the first sample).
    ``rlcore run`` in this process, through click's test runner: the run's own end kills them, not the end of
    a process."""
    pids = tmp_path / "helper.pids"
    reward = tmp_path / "failing_reward.py"
    reward.write_text(
        HELPER_REWARD.format(pids=str(pids), seconds=306).replace(
            "    return 0.5", "    from rlcore.errors import RLCoreError\n    raise RLCoreError('the scorer gives up')"
        )
    )
    args = [
        *tiny_overrides(tmp_path, tiny_model_dir, task),
        f"custom_reward_function.path={reward}",
        "reward_model.scorer_timeout=0",
        "trainer.test_freq=-1",
    ]
    result = CliRunner().invoke(cli, ["run", *args], prog_name="rlcore", catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "error: the scorer gives up" in result.stderr
    assert _wait_dead([int(pid) for pid in pids.read_text().split()]) == []
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed: the scorer gives up"


def test_the_run_ends_the_helpers_when_the_watchdog_ends_it(tmp_path: Path) -> None:
    """The stop watchdog's forced exit (the main thread stuck in user code) kills them too, and the last
    messages still reach the run's output."""
    code = textwrap.dedent(
        """
        import os, signal, subprocess, threading, time
        from rlcore.graceful_stop import StopRequest
        from rlcore.usercode import user_call

        with StopRequest(grace_s=0.5) as stop:
            with user_call("the stuck scorer"):
                helper = subprocess.Popen(["sleep", "305"], start_new_session=True)
                print("helper", helper.pid, flush=True)
                threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})  # no handler can run here
                time.sleep(60)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 143, proc.stdout + proc.stderr
    helper = int(proc.stdout.split()[1])
    assert "writing the summary and exiting with status 143" in proc.stderr
    assert f"process {helper} (sleep 305), started by the stuck scorer" in proc.stderr
    assert _wait_dead([helper]) == []


def test_the_sandbox_server_started_inside_an_inline_scorer_is_the_runs_own(tmp_path: Path) -> None:
    """The code sandbox's launcher server starts on first use, which may be inside an inline code reward: it is
    rlcore's, so it is neither warned about nor killed as a process the scorer left running."""
    script = tmp_path / "server.py"
    script.write_text(
        textwrap.dedent(
            """
            from rlcore.child_processes import become_subreaper, kill_leftovers
            from rlcore_plugin_sandbox import server
            from rlcore.usercode import user_call

            become_subreaper()
            with user_call("the reward scorer (data_source 'code')"):
                launcher = server.launcher_server()
            print(kill_leftovers(), launcher.process.poll(), flush=True)
            """
        )
    )
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]", "None"], "nothing left over, and the server still runs"
