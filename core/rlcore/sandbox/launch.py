"""The caller's side of the launcher: prepare a program's folder and cgroup, start :mod:`.jail.launcher`,
collect the program's output and reports, stop it at its wall-time limit.

Everything a call leaves behind is removed before :func:`execute` returns: the folder (the program's own
tmpfs goes with its mount namespace) and the cgroup.
"""

from __future__ import annotations

import os
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rlcore.errors import RLCoreError
from rlcore.sandbox.cgroups import Cgroup, Layout
from rlcore.sandbox.limits import SandboxLimits
from rlcore.sandbox.streams import Stream, read_until
from rlcore.sandbox.view import visible_paths

#: the launcher script, run by this interpreter in isolated mode without site-packages
LAUNCHER = Path(__file__).with_name("jail") / "launcher.py"
#: environment of a sandboxed program: nothing inherited from the run (no tokens, no proxies)
BASE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "PYTHONIOENCODING": "utf-8"}
#: separates list items in the launcher's arguments (``SEPARATOR`` of :mod:`.jail.launcher`)
SEPARATOR = "\x1f"
#: how long the launcher gets to kill the program's tree after SIGTERM before it is killed itself
STOP_GRACE_S = 1.0


class SandboxError(RLCoreError):
    """The sandbox could not be set up on this host (not something the program did)."""


@dataclass
class Execution:
    """What the launcher and the program reported, and whether the wall-time limit passed."""

    stdout: Stream
    stderr: Stream
    events: list[str]
    setup: list[str]
    timed_out: bool
    wall_seconds: float
    oom_kills: int

    def reported(self, key: str) -> list[str]:
        """The launcher's lines that start with ``key``, without it."""
        return [line[len(key) + 1 :] for line in self.setup if line.startswith(key + " ")]

    @property
    def exit_code(self) -> int | None:
        """The program's exit code (negative: the signal that killed it); ``None`` when it did not end itself."""
        codes = self.reported("exit")
        return int(codes[-1]) if codes else None

    def info(self) -> dict[str, str]:
        """The launcher's facts about the host (``info KEY VALUE`` lines)."""
        return dict(line.partition(" ")[::2] for line in self.reported("info"))


def execute(mode: str, code: str, stdin: str, limits: SandboxLimits, layout: Layout | None, audit: bool) -> Execution:
    """Run ``code`` confined by ``mode`` (``namespaces``, ``landlock`` or ``none``), with a cgroup under
    ``layout`` when given. Raises :class:`SandboxError` when the launcher could not confine the program."""
    base = Path(tempfile.mkdtemp(prefix="rlcore-sandbox-"))
    cgroup = None
    try:
        base.chmod(0o711)  # the program's own user walks through it to its folder
        folder = base / "work"
        folder.mkdir(mode=0o700)
        (base / "root").mkdir()
        (folder / "main.py").write_text(code, encoding="utf-8")
        (base / "stdin").write_text(stdin, encoding="utf-8")
        if layout is not None:
            cgroup = Cgroup(layout, limits.memory_mb << 20, limits.max_processes)
        execution = _launch(mode, base, limits, cgroup.procs if cgroup else [], audit)
        execution.oom_kills = cgroup.oom_kills() if cgroup else 0
    except OSError as error:
        raise SandboxError(f"cannot prepare a sandboxed program ({error})") from error
    finally:
        if cgroup is not None:
            cgroup.remove()
        shutil.rmtree(base, ignore_errors=True)
    errors = execution.reported("error")
    if errors:
        raise SandboxError(f"the sandbox ({mode}) failed {errors[0]}")
    return execution


def _launch(mode: str, base: Path, limits: SandboxLimits, cgroup_procs: list[str], audit: bool) -> Execution:
    setup_read, setup_write = os.pipe()
    events_read, events_write = os.pipe()
    cpu = max(1, int(limits.cpu_seconds + 0.999))
    spec: dict[str, object] = {
        "mode": mode,
        "python": sys.executable,
        "folder": str(base / "work"),
        "stage": str(base / "root"),
        "visible": visible_paths(),
        "folder_mb": limits.folder_mb,
        "limits": f"{cpu},{limits.memory_mb << 20},{limits.file_mb << 20}",
        "max_processes": limits.max_processes,
        "cgroup_procs": cgroup_procs,
        "setup_fd": setup_write,
        "events_fd": events_write,
        "audit": "1" if audit else "0",
        "site": [path for path in site.getsitepackages() if os.path.isdir(path)],
        "env": [f"{k}={v}" for k, v in {**BASE_ENV, "HOME": str(base / "work"), "TMPDIR": str(base / "work")}.items()],
    }
    arguments = [f"{key}={SEPARATOR.join(value) if isinstance(value, list) else value}" for key, value in spec.items()]
    start = time.monotonic()
    try:
        with open(base / "stdin", "rb") as stdin:
            process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(LAUNCHER), *arguments],
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=base,
                env=BASE_ENV,
                pass_fds=(setup_write, events_write),
                start_new_session=True,
            )
    finally:
        os.close(setup_write)
        os.close(events_write)
    assert process.stdout is not None and process.stderr is not None
    keep = limits.output_bytes
    streams = {"stdout": Stream(keep), "stderr": Stream(keep), "events": Stream(65536), "setup": Stream(65536)}
    pipes = {"stdout": process.stdout.fileno(), "stderr": process.stderr.fileno()}
    pipes.update(events=events_read, setup=setup_read)
    deadline = start + limits.wall_seconds
    try:
        timed_out = read_until(pipes, streams, deadline)
        if not timed_out:  # every pipe closed: the program ended; the launcher is finishing
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()) + STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                timed_out = True
        if timed_out:
            _stop(process)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # anything of the launcher's session still there
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()
        process.stdout.close()
        process.stderr.close()
        os.close(events_read)
        os.close(setup_read)
    return Execution(
        stdout=streams["stdout"],
        stderr=streams["stderr"],
        events=streams["events"].lines(),
        setup=streams["setup"].lines(),
        timed_out=timed_out,
        wall_seconds=time.monotonic() - start,
        oom_kills=0,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Ask the launcher to kill the program's whole tree (SIGTERM); kill the launcher if it does not end."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
