"""What a sandboxed program may use (:class:`SandboxLimits`) and what it did (:class:`SandboxResult`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "error", "timeout", "memory", "blocked"]


@dataclass(frozen=True)
class SandboxLimits:
    """What one sandboxed program may use.

    Attributes:
        cpu_seconds: CPU time of each process before the kernel stops it (``status="timeout"``).
        wall_seconds: wall-clock time before every process of the program is killed (``status="timeout"``).
        memory_mb: memory of the whole program: its address space per process (past it allocations fail,
            ``status="memory"``) and, where a memory cgroup is available, all its processes' memory together,
            the kernel's pipe and socket buffers included (past it the kernel kills the program,
            ``status="memory"``). Without a memory cgroup the kernel's buffers are not bounded: ``rlcore
            sandbox check`` then says memory is not enforced.
        output_bytes: the most of stdout and of stderr (each) that is kept.
        file_mb: the largest file it may write.
        folder_mb: the most its folder and ``/tmp`` may hold together: a private tmpfs in the ``namespaces``
            mode (a write past it fails); elsewhere a watchdog that stops the program once its folder holds
            more (``status="error"``, named at the end of ``stderr``).
        max_processes: processes and threads it may have at once (``RLIMIT_NPROC``, and the pids cgroup
            where available).
    """

    cpu_seconds: float = 5.0
    wall_seconds: float = 10.0
    memory_mb: int = 512
    output_bytes: int = 65536
    file_mb: int = 16
    folder_mb: int = 64
    max_processes: int = 16

    def __post_init__(self) -> None:
        for name in (
            "cpu_seconds",
            "wall_seconds",
            "memory_mb",
            "output_bytes",
            "file_mb",
            "folder_mb",
            "max_processes",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be positive, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class SandboxResult:
    """What a sandboxed program did.

    ``status`` is ``ok`` (exit code 0), ``error`` (a non-zero exit, an uncaught exception, a signal),
    ``timeout`` (CPU or wall time ran out), ``memory`` (an allocation failed at the memory limit, or the kernel
    killed the program there) or ``blocked`` (it attempted something the audit hook refuses — network,
    process creation, writing outside its directory — whatever it did afterwards). ``blocked`` lists the
    refused actions. ``isolation`` is how the kernel confined it: ``namespaces``, ``landlock`` or ``none``
    (see :func:`rlcore_plugin_sandbox.host_isolation`); ``network_namespace`` is true with ``namespaces``.
    ``truncated`` says whether output was cut at ``output_bytes``, and ``truncated_streams`` which streams
    (``stdout``, ``stderr``).
    """

    status: Status
    stdout: str
    stderr: str
    exit_code: int | None
    wall_seconds: float
    truncated: bool = False
    blocked: tuple[str, ...] = ()
    network_namespace: bool = False
    isolation: str = "none"
    truncated_streams: tuple[str, ...] = ()
