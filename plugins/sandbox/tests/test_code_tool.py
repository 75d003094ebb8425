"""The ``code_interpreter`` tool: model-written Python run in the sandbox through the tool executor; hostile
programs come back to the model as messages, within limits."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from rlcore_plugin_agents.tools import ToolExecutor, load_tools
from rlcore_plugin_sandbox import host_isolation
from rlcore_plugin_sandbox.tool import CodeInterpreterTool
from rlcore_testkit.contracts import ToolContract

from rlcore.api import RLCoreError, ToolCall, ToolResult
from rlcore.plugins import load_plugins


def call(ex: ToolExecutor, tool_call: ToolCall) -> tuple[ToolResult, dict[str, float]]:
    metrics: dict[str, float] = {}
    return asyncio.run(ex.call("t0", tool_call, metrics)), metrics


HOSTILE = {
    "network": "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)\nprint('connected')",
    "write outside": "open('/tmp/rlcore-escape-test.txt', 'w').write('x')\nprint('wrote')",
    "fork bomb": "import os\nwhile True:\n    os.fork()",
    "memory hog": "x = bytearray(4 * 1024**3)\nprint(len(x))",
    "endless loop": "while True:\n    pass",
    "flood": "print('y' * 10_000_000)",
}


#: where the kernel cannot confine programs fully, the code tool's tests accept it (test_sandbox_host.py tests the refusal)
ACCEPT_THIS_HOST = host_isolation().level != "full"


def interpreter(limit: int = 512) -> ToolExecutor:
    config = {
        "cpu_seconds": 2,
        "wall_seconds": 4,
        "memory_mb": 256,
        "timeout": 20,
        "allow_unconfined": ACCEPT_THIS_HOST,
    }
    tool = CodeInterpreterTool(config)
    return ToolExecutor({tool.name: tool}, 4, limit, "right")


def test_code_interpreter_runs_code() -> None:
    result, metrics = call(interpreter(), ToolCall("code_interpreter", {"code": "print(sum(range(10**6)))"}))
    assert result.text.strip() == "499999500000"
    assert metrics["tool/code_interpreter/status_ok"] == 1


def test_code_interpreter_contains_escape_attempts() -> None:
    """Every hostile program comes back as a message to the model; the rollout's event loop is never stuck."""
    ex = interpreter()
    metrics: dict[str, float] = {}

    async def all_at_once() -> list[ToolResult]:
        calls = [ToolCall("code_interpreter", {"code": code}) for code in HOSTILE.values()]
        return await asyncio.gather(*(ex.call(f"h{i}", c, metrics) for i, c in enumerate(calls)))

    start = time.perf_counter()
    results = dict(zip(HOSTILE, asyncio.run(all_at_once())))
    assert time.perf_counter() - start < 120  # the endless loop and the fork bomb were stopped
    assert not Path("/tmp/rlcore-escape-test.txt").exists()
    for name in ("network", "write outside", "fork bomb"):
        assert "Error (blocked)" in results[name].text, (name, results[name].text)
    assert "Error (memory)" in results["memory hog"].text or "MemoryError" in results["memory hog"].text
    assert "Error (timeout)" in results["endless loop"].text
    assert len(results["flood"].text) <= 512 and metrics["tool/truncated"] >= 1
    assert metrics.get("tool/errors", 0.0) == 0  # each was answered by the tool itself, none raised


def test_code_interpreter_limits_are_checked_when_the_yaml_loads(tmp_path: Path) -> None:
    path = tmp_path / "tools.yaml"
    path.write_text("tools:\n  - class_name: code_interpreter\n    config: {memory_mb: -1}\n")
    with pytest.raises(
        RLCoreError, match="tools\\[0\\]: code_interpreter config: SandboxLimits.memory_mb must be positive"
    ):
        load_tools(str(path), load_plugins().registry)


class TestCodeInterpreterContract(ToolContract):
    component_name = "code_interpreter"
    tool_config = {"allow_unconfined": ACCEPT_THIS_HOST}
    example_arguments = {"code": "print(6*7)"}
