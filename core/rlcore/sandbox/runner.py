"""The sandbox's entry points: :func:`run_python` and :func:`run_python_async`."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from rlcore.sandbox.host import host_isolation
from rlcore.sandbox.launch import Execution, execute
from rlcore.sandbox.limits import SandboxLimits, SandboxResult, Status
from rlcore.sandbox.policy import require_confinement


def run_python(
    code: str,
    *,
    stdin: str = "",
    limits: SandboxLimits | None = None,
    allow_unconfined: bool | None = None,
    audit_hook: bool = True,
) -> SandboxResult:
    """Run the Python program ``code`` in the sandbox, feeding it ``stdin``, and return what it did.

    Nothing the program does raises here. What does: a host that cannot confine the program fully
    (:class:`~rlcore.sandbox.policy.SandboxUnavailableError`) unless ``allow_unconfined`` accepts it
    (``None``: ``RLCORE_SANDBOX_ALLOW_UNCONFINED`` decides), and a sandbox that cannot be set up
    (:class:`~rlcore.sandbox.launch.SandboxError`). ``audit_hook=False`` leaves out the friendly layer, so
    that only the kernel confines the program (what ``rlcore sandbox check`` and the tests verify).
    """
    limits = limits or SandboxLimits()
    host = host_isolation()
    require_confinement(host, allow_unconfined)
    execution = execute(host.mode, code, stdin, limits, host.cgroups, audit_hook)
    blocked = tuple(line.removeprefix("blocked ") for line in execution.events if line.startswith("blocked "))
    return SandboxResult(
        status=_status(execution, blocked),
        stdout=execution.stdout.text(),
        stderr=execution.stderr.text(),
        exit_code=execution.exit_code,
        wall_seconds=execution.wall_seconds,
        truncated=execution.stdout.dropped > 0 or execution.stderr.dropped > 0,
        blocked=blocked,
        network_namespace=host.mode == "namespaces",
        isolation=host.mode,
    )


async def run_python_async(code: str, **options: Any) -> SandboxResult:
    """:func:`run_python` (with the same keyword arguments) without blocking the event loop: it runs in a
    worker thread."""
    return await asyncio.to_thread(run_python, code, **options)


def _status(execution: Execution, blocked: tuple[str, ...]) -> Status:
    if blocked:
        return "blocked"
    if execution.timed_out:
        return "timeout"
    if execution.oom_kills:
        return "memory"
    if execution.exit_code in (-signal.SIGXCPU, -signal.SIGKILL):
        return "timeout"
    if "memory" in execution.events:
        return "memory"
    return "ok" if execution.exit_code == 0 else "error"
