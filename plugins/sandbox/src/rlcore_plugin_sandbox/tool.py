"""The ``code_interpreter`` tool of multi-turn rollouts: model-written Python run in the sandbox."""

from __future__ import annotations

from typing import Any

from rlcore.api import RLCoreError, Tool, ToolResult
from rlcore_plugin_sandbox import SandboxLimits, host_isolation, run_python_async
from rlcore_plugin_sandbox.policy import require_confinement

__all__ = ["CodeInterpreterTool"]


class CodeInterpreterTool(Tool):
    """``code_interpreter(code)``: runs model-written Python in :mod:`rlcore_plugin_sandbox` (a subprocess with
    CPU-time, wall-time and memory limits, no network, a throwaway directory) and returns its output.

    Config: ``cpu_seconds``, ``wall_seconds``, ``memory_mb``, ``output_bytes``, ``file_mb``, ``folder_mb``,
    ``max_processes`` (the sandbox limits, checked when the tool is built) and ``allow_unconfined`` (default
    false: where the kernel cannot confine the code fully — ``rlcore sandbox check`` — building the tool is an
    error saying why; true runs it there anyway). A program that fails, times out or is blocked gets its
    status and stderr back, counted in the tool metrics.
    """

    default_schema = {
        "type": "function",
        "function": {
            "name": "code_interpreter",
            "description": "Run a Python program and return what it prints.",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string", "description": "the program; print the result"}},
                "required": ["code"],
            },
        },
    }

    #: it runs model-written code in :mod:`rlcore_plugin_sandbox` (the run's plan names the sandbox's confinement)
    runs_code = True
    #: the tool config keys that set :class:`rlcore_plugin_sandbox.SandboxLimits`
    LIMITS = ("cpu_seconds", "wall_seconds", "memory_mb", "output_bytes", "file_mb", "folder_mb", "max_processes")

    def __init__(self, config: Any = None, tool_schema: Any = None) -> None:
        super().__init__(config, tool_schema)
        try:
            self.limits = SandboxLimits(**{name: self.config[name] for name in self.LIMITS if name in self.config})
        except (TypeError, ValueError) as exc:
            raise RLCoreError(f"code_interpreter config: {exc}") from exc
        self.allow_unconfined = self.config.get("allow_unconfined", False)
        if not isinstance(self.allow_unconfined, bool):
            raise RLCoreError(
                f"code_interpreter config: allow_unconfined must be true or false, got {self.allow_unconfined!r}"
            )
        try:
            require_confinement(host_isolation(), self.allow_unconfined)
        except RLCoreError as exc:
            raise RLCoreError(f"code_interpreter: {exc}") from exc

    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> ToolResult:
        """Run the code; the response is stdout (and stderr or the sandbox status when not ``ok``)."""
        code = arguments.get("code")
        if not isinstance(code, str):
            return ToolResult("Error: the argument 'code' (a string) is required")
        result = await run_python_async(code, limits=self.limits, allow_unconfined=self.allow_unconfined)
        metrics = {f"status_{result.status}": 1.0, "truncated": float(result.truncated)}
        if result.status == "ok":
            return ToolResult(result.stdout, metrics=metrics)
        detail = ", ".join(result.blocked) if result.blocked else ""
        if not detail and result.stderr.strip():
            detail = result.stderr.strip().splitlines()[-1]
        return ToolResult(f"{result.stdout}Error ({result.status}): {detail}".strip(), metrics=metrics)
