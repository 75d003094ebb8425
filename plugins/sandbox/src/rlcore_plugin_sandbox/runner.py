"""The sandbox's entry points: :func:`run_python` and :func:`run_python_async`."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from rlcore_plugin_sandbox.host import host_isolation
from rlcore_plugin_sandbox.launch import Execution, check_stdin, execute
from rlcore_plugin_sandbox.limits import SandboxLimits, SandboxResult, Status
from rlcore_plugin_sandbox.policy import require_confinement


def run_python(
    code: str,
    *,
    stdin: str = "",
    limits: SandboxLimits | None = None,
    allow_unconfined: bool | None = None,
    audit_hook: bool = True,
) -> SandboxResult:
    """Run the Python program ``code`` in the sandbox, feeding it ``stdin``, and return what it did.

    Nothing the program does raises here. What does: ``stdin`` that has no UTF-8 form (a lone surrogate such
    as ``"\\ud800"``: :class:`~rlcore_plugin_sandbox.launch.SandboxInputError`, a ``ValueError``; a lone surrogate in
    ``code`` is the program's own ``SyntaxError``), a host that cannot confine the program fully
    (:class:`~rlcore_plugin_sandbox.policy.SandboxUnavailableError`) unless ``allow_unconfined`` accepts it
    (``None``: ``RLCORE_SANDBOX_ALLOW_UNCONFINED`` decides), and a sandbox that cannot be set up
    (:class:`~rlcore_plugin_sandbox.launch.SandboxError`). ``audit_hook=False`` leaves out the friendly layer, so
    that only the kernel confines the program (what ``rlcore sandbox check`` and the tests verify).
    """
    limits = limits or SandboxLimits()
    check_stdin(stdin)
    host = host_isolation()
    require_confinement(host, allow_unconfined)
    execution = execute(host.mode, code, stdin, limits, host.cgroups, audit_hook)
    blocked = tuple(line.removeprefix("blocked ") for line in execution.events if line.startswith("blocked "))
    stderr = execution.stderr.text()
    for held in execution.reported("folder"):
        what = f"held {int(held) / 2**20:.1f} MB" if held.isdigit() else "could not be measured (a folder unreadable)"
        stderr += f"\n[sandbox: its folder {what}, more than folder_mb={limits.folder_mb}]"
    cut = tuple(name for name in ("stdout", "stderr") if getattr(execution, name).dropped)
    return SandboxResult(
        status=_status(execution, blocked),
        stdout=execution.stdout.text(),
        stderr=stderr,
        exit_code=execution.exit_code,
        wall_seconds=execution.wall_seconds,
        truncated=bool(cut),
        truncated_streams=cut,
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
    if execution.reported("folder"):
        return "error"
    if execution.timed_out:
        return "timeout"
    if execution.oom_kills:
        return "memory"
    if execution.exit_code in (-signal.SIGXCPU, -signal.SIGKILL):
        return "timeout"
    if "memory" in execution.events:
        return "memory"
    return "ok" if execution.exit_code == 0 else "error"
