"""Run untrusted Python (model-written code) in a confined subprocess: the core sandbox.

One sandbox serves the code-interpreter tool of multi-turn rollouts and the code-execution reward. Each
:func:`run_python` call writes the program into a fresh throwaway directory and runs it with this
interpreter (isolated mode, ``-I``) under these limits:

- **CPU time** (``RLIMIT_CPU``) and **wall time**: at the wall deadline the whole process group is killed;
- **memory** (``RLIMIT_AS``): an allocation past the limit fails, the program sees ``MemoryError``;
- **files**: each file it writes is capped (``RLIMIT_FSIZE``), and it may write only inside its directory,
  which is deleted afterwards;
- **network**: the program runs in new user + network namespaces where the kernel allows (no interface but a
  loopback that is down), and socket creation is refused in any case;
- **processes**: fork, exec, subprocess, spawn, signals to other processes and ``ctypes`` are refused;
- **output**: stdout and stderr are each cut to ``output_bytes`` (the rest is read and dropped, so a program
  that prints 10 MB neither blocks nor floods memory).

The refusals come from an audit hook (PEP 578) installed before the program starts (:mod:`._child`). The
rlimits, the kill and the namespaces are enforced by the kernel; the audit hook is a Python-level layer that
catches what a model writes by accident or on purpose through the standard library, and reports it
(``status="blocked"``). It is not a boundary against a determined attacker with a native-code exploit: run
rlcore's workers in a container when the policy may be adversarial.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Status = Literal["ok", "error", "timeout", "memory", "blocked"]

#: the file the sandboxed interpreter runs first (confinement, then the program)
CHILD = Path(__file__).with_name("_child.py")
#: environment of a sandboxed program: nothing inherited from the run (no tokens, no proxies)
BASE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "PYTHONIOENCODING": "utf-8"}


@dataclass(frozen=True)
class SandboxLimits:
    """What one sandboxed program may use.

    Attributes:
        cpu_seconds: CPU time before the kernel stops it (``status="timeout"``).
        wall_seconds: wall-clock time before its process group is killed (``status="timeout"``).
        memory_mb: address-space limit; past it allocations fail (``status="memory"``).
        output_bytes: the most of stdout and of stderr (each) that is kept.
        file_mb: the largest file it may write inside its directory.
    """

    cpu_seconds: float = 5.0
    wall_seconds: float = 10.0
    memory_mb: int = 512
    output_bytes: int = 65536
    file_mb: int = 16

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "wall_seconds", "memory_mb", "output_bytes", "file_mb"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be positive, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class SandboxResult:
    """What a sandboxed program did.

    ``status`` is ``ok`` (exit code 0), ``error`` (a non-zero exit, an uncaught exception, a signal),
    ``timeout`` (CPU or wall time ran out), ``memory`` (an allocation failed at the memory limit) or
    ``blocked`` (it attempted something forbidden — network, process creation, writing outside its
    directory — whatever it did afterwards). ``blocked`` lists the refused actions.
    """

    status: Status
    stdout: str
    stderr: str
    exit_code: int | None
    wall_seconds: float
    truncated: bool = False
    blocked: tuple[str, ...] = ()
    network_namespace: bool = False


def run_python(code: str, *, stdin: str = "", limits: SandboxLimits | None = None) -> SandboxResult:
    """Run the Python program ``code`` in the sandbox, feeding it ``stdin``, and return what it did.

    Never raises for anything the program does; the throwaway directory is removed before returning.
    """
    limits = limits or SandboxLimits()
    workdir = tempfile.mkdtemp(prefix="rlcore-sandbox-")
    try:
        program = Path(workdir, "main.py")
        program.write_text(code, encoding="utf-8")
        stdin_file = Path(workdir, ".stdin")
        stdin_file.write_text(stdin, encoding="utf-8")
        return _run(program, stdin_file, workdir, limits)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


async def run_python_async(code: str, *, stdin: str = "", limits: SandboxLimits | None = None) -> SandboxResult:
    """:func:`run_python` without blocking the event loop (it runs in a worker thread)."""
    return await asyncio.to_thread(run_python, code, stdin=stdin, limits=limits)


def _run(program: Path, stdin_file: Path, workdir: str, limits: SandboxLimits) -> SandboxResult:
    channel_read, channel_write = os.pipe()
    cpu = max(1, int(limits.cpu_seconds + 0.999))
    rlimits = f"{cpu},{limits.memory_mb * 2**20},{limits.file_mb * 2**20}"
    command = [sys.executable, "-I", str(CHILD), str(channel_write), workdir, str(program), rlimits]
    start = time.monotonic()
    with open(stdin_file, "rb") as stdin:
        process = subprocess.Popen(
            command,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env={**BASE_ENV, "HOME": workdir, "TMPDIR": workdir},
            pass_fds=(channel_write,),
            start_new_session=True,
        )
    os.close(channel_write)
    streams, timed_out = _collect(process, channel_read, start + limits.wall_seconds, limits.output_bytes)
    wall = time.monotonic() - start
    exit_code = process.returncode
    events = streams["channel"].data.decode(errors="replace").splitlines()
    blocked = tuple(line.removeprefix("blocked ") for line in events if line.startswith("blocked "))
    return SandboxResult(
        status=_status(exit_code, timed_out, blocked, "memory" in events),
        stdout=streams["stdout"].text(),
        stderr=streams["stderr"].text(),
        exit_code=exit_code,
        wall_seconds=wall,
        truncated=streams["stdout"].dropped > 0 or streams["stderr"].dropped > 0,
        blocked=blocked,
        network_namespace="network-namespace" in events,
    )


@dataclass
class _Stream:
    """The first ``keep`` bytes of one pipe, and how many more were read and dropped."""

    keep: int
    data: bytes = b""
    dropped: int = 0

    def add(self, chunk: bytes) -> None:
        room = self.keep - len(self.data)
        self.data += chunk[:room] if room > 0 else b""
        self.dropped += max(0, len(chunk) - max(room, 0))

    def text(self) -> str:
        text = self.data.decode(errors="replace")
        return text + (f"\n[... {self.dropped} more bytes cut]" if self.dropped else "")


def _collect(
    process: subprocess.Popen[bytes], channel: int, deadline: float, keep: int
) -> tuple[dict[str, _Stream], bool]:
    """Read stdout, stderr and the report channel until the program ends or ``deadline`` passes."""
    assert process.stdout is not None and process.stderr is not None
    streams = {"stdout": _Stream(keep), "stderr": _Stream(keep), "channel": _Stream(65536)}
    selector = selectors.DefaultSelector()
    selector.register(process.stdout.fileno(), selectors.EVENT_READ, "stdout")
    selector.register(process.stderr.fileno(), selectors.EVENT_READ, "stderr")
    selector.register(channel, selectors.EVENT_READ, "channel")
    timed_out = False
    try:
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in selector.select(timeout=remaining):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    streams[key.data].add(chunk)
                else:
                    selector.unregister(key.fd)
        if not timed_out:  # the pipes closed; the program may still run
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        selector.close()
        _kill_group(process.pid)
        process.wait()
        process.stdout.close()
        process.stderr.close()
        os.close(channel)
    return streams, timed_out


def _kill_group(pid: int) -> None:
    """Kill every process of the program's session (it is its own process group leader)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _status(exit_code: int | None, timed_out: bool, blocked: tuple[str, ...], out_of_memory: bool) -> Status:
    if blocked:
        return "blocked"
    if timed_out or exit_code in (-signal.SIGXCPU, -signal.SIGKILL):
        return "timeout"
    if out_of_memory:
        return "memory"
    return "ok" if exit_code == 0 else "error"
