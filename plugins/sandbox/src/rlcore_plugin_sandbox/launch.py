"""The caller's side of a launch: prepare a program's folder and cgroup, have this process's launcher server
start :mod:`.jail.launcher` for it, collect the program's output and reports, stop it at its wall-time limit.

Everything a call leaves behind is removed before :func:`execute` returns: the folder (the program's own
tmpfs goes with its mount namespace) and the cgroup.
"""

from __future__ import annotations

import os
import shutil
import signal
import site
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rlcore.api import RLCoreError
from rlcore_plugin_sandbox.cgroups import Cgroup, Layout
from rlcore_plugin_sandbox.limits import SandboxLimits
from rlcore_plugin_sandbox.server import LauncherServer, launcher_server
from rlcore_plugin_sandbox.streams import Stream, read_until
from rlcore_plugin_sandbox.view import visible_paths

#: environment of a sandboxed program: nothing inherited from the run (no tokens, no proxies)
BASE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "PYTHONIOENCODING": "utf-8"}
#: separates list items in the launcher's arguments (``SEPARATOR`` of :mod:`.jail.launcher`)
SEPARATOR = "\x1f"
#: how long the launcher gets to kill the program's tree after SIGTERM, and then the server after SIGKILL
STOP_GRACE_S = 1.0


class SandboxError(RLCoreError):
    """The sandbox could not be set up on this host (not something the program did)."""


class SandboxInputError(RLCoreError, ValueError):
    """What the caller gave a sandboxed program cannot be given to it (its stdin is not valid text)."""


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
        # a lone surrogate in the code goes as the bytes Python then refuses to compile (a SyntaxError of the
        # program); stdin was checked by the caller (:func:`encode_stdin`)
        (folder / "main.py").write_bytes(code.encode("utf-8", "surrogatepass"))
        (base / "stdin").write_bytes(stdin.encode("utf-8"))
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
        tmpdir = os.environ.get("TMPDIR")
        where = f"TMPDIR={tmpdir}" if tmpdir else "TMPDIR is not set"
        raise SandboxError(f"the sandbox ({mode}) failed {errors[0]} (the program's folder was {folder}: {where})")
    return execution


def check_stdin(stdin: str) -> None:
    """Raise :class:`SandboxInputError` when ``stdin`` cannot be a program's standard input: text that has no
    UTF-8 form (a lone surrogate such as ``"\\ud800"``)."""
    try:
        stdin.encode("utf-8")
    except UnicodeEncodeError as error:
        raise SandboxInputError(
            f"the program's stdin is not valid text: {error.reason} {stdin[error.start : error.end]!r} at "
            f"character {error.start} (it has no UTF-8 form)"
        ) from None


def _launch(mode: str, base: Path, limits: SandboxLimits, cgroup_procs: list[str], audit: bool) -> Execution:
    cpu = max(1, int(limits.cpu_seconds + 0.999))
    spec: dict[str, object] = {
        "mode": mode,
        "python": sys.executable,
        "folder": str(base / "work"),
        "stage": str(base / "root"),
        "visible": list(visible_paths()),
        "folder_mb": limits.folder_mb,
        "limits": f"{cpu},{limits.memory_mb << 20},{limits.file_mb << 20}",
        "max_processes": limits.max_processes,
        "cgroup_procs": cgroup_procs,
        "audit": "1" if audit else "0",
        "site": [path for path in site.getsitepackages() if os.path.isdir(path)],
        "env": [f"{k}={v}" for k, v in {**BASE_ENV, "HOME": str(base / "work"), "TMPDIR": str(base / "work")}.items()],
    }
    arguments = [f"{key}={SEPARATOR.join(value) if isinstance(value, list) else value}" for key, value in spec.items()]
    names = ("stdout", "stderr", "setup", "events")
    pipes = {name: os.pipe() for name in names}
    readers = {name: pipes[name][0] for name in names}
    keep = limits.output_bytes
    streams = {"stdout": Stream(keep), "stderr": Stream(keep), "events": Stream(65536), "setup": Stream(65536)}
    start = time.monotonic()
    try:
        server = launcher_server()
        stdin = os.open(base / "stdin", os.O_RDONLY | os.O_CLOEXEC)
        try:
            launcher = server.launch(arguments, [stdin, *(pipes[name][1] for name in names)])
        finally:
            os.close(stdin)
            for name in names:
                os.close(pipes[name][1])
        timed_out = read_until(readers, streams, start + limits.wall_seconds)
        if timed_out and read_until(readers, streams, _signal(server, launcher, signal.SIGTERM)):
            read_until(readers, streams, _signal(server, launcher, signal.SIGKILL))
    finally:
        for reader in readers.values():
            os.close(reader)
    return Execution(
        stdout=streams["stdout"],
        stderr=streams["stderr"],
        events=streams["events"].lines(),
        setup=streams["setup"].lines(),
        timed_out=timed_out,
        wall_seconds=time.monotonic() - start,
        oom_kills=0,
    )


def _signal(server: LauncherServer, launcher: int, number: int) -> float:
    """Send ``number`` to the launcher (SIGTERM: it kills the program's tree and ends; SIGKILL: the server
    kills what is left), directly where the server is gone; the deadline to wait for the pipes to close."""
    try:
        server.signal(launcher, number)
    except OSError:
        try:
            os.kill(launcher, number)
        except ProcessLookupError:
            pass
    return time.monotonic() + STOP_GRACE_S
