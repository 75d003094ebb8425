"""Tools, the Hermes parser and the tool executor: every bad input is contained and counted, never a crash."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from rlcore_plugin_agents.builtin_tools import CalculatorTool, evaluate_arithmetic
from rlcore_plugin_agents.parsers import HermesToolParser
from rlcore_plugin_agents.tools import ToolExecutor, load_tools, truncate
from rlcore_testkit.contracts import ToolContract, ToolParserContract

from rlcore.api import Tool, ToolCall, ToolResult
from rlcore.errors import RLCoreError
from rlcore.plugins import load_plugins


def schema(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": name, "parameters": {"type": "object"}}}


class Raises(Tool):
    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> str:
        raise ValueError("boom")


class Hangs(Tool):
    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> str:
        await asyncio.sleep(3600)
        return "never"


class Floods(Tool):
    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> str:
        return "x" * 10_000_000


class Sleeps(Tool):
    """Sleeps ``arguments["s"]`` seconds and records how many calls overlap (calls run on the executor's tool
    threads: the counters are locked)."""

    running = 0
    peak = 0
    lock = threading.Lock()

    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> ToolResult:
        with self.lock:
            type(self).running += 1
            type(self).peak = max(type(self).peak, type(self).running)
        await asyncio.sleep(arguments["s"])
        with self.lock:
            type(self).running -= 1
        return ToolResult("slept", reward=0.5, metrics={"naps": 1.0})


def executor(max_parallel: int = 4, limit: int = 256) -> ToolExecutor:
    tools: dict[str, Tool] = {
        "raises": Raises({}, schema("raises")),
        "hangs": Hangs({"timeout": 0.2}, schema("hangs")),
        "floods": Floods({}, schema("floods")),
        "sleeps": Sleeps({}, schema("sleeps")),
        "calculator": CalculatorTool(),
    }
    return ToolExecutor(tools, max_parallel, limit, "middle")


def call(ex: ToolExecutor, tool_call: ToolCall) -> tuple[ToolResult, dict[str, float]]:
    metrics: dict[str, float] = {}
    return asyncio.run(ex.call("t0", tool_call, metrics)), metrics


# ------------------------------------------------------------------ parser
def test_hermes_parses_calls_and_reports_malformed_ones() -> None:
    parser = HermesToolParser()
    text = (
        'think <tool_call>\n{"name": "calculator", "arguments": {"expression": "1+2"}}\n</tool_call>'
        '<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"3\\"}"}</tool_call>'
    )
    assert parser.parse(text) == [
        ToolCall("calculator", {"expression": "1+2"}),
        ToolCall("calculator", {"expression": "3"}),
    ]
    assert parser.parse("no calls here") == []
    (bad_json,) = parser.parse('<tool_call>{"name": "calculator", </tool_call>')
    assert bad_json.error is not None and "not valid JSON" in bad_json.error
    (no_name,) = parser.parse('<tool_call>["calculator"]</tool_call>')
    assert no_name.error is not None and '"name"' in no_name.error
    (bad_args,) = parser.parse('<tool_call>{"name": "c", "arguments": [1]}</tool_call>')
    assert bad_args.error is not None and "arguments" in bad_args.error
    (unclosed,) = parser.parse('<tool_call>{"name": "calculator", "arguments": {}}')
    assert unclosed.error is not None and "not closed" in unclosed.error


# ------------------------------------------------------------------ executor: each failure contained
def test_malformed_call_becomes_an_error_message() -> None:
    result, metrics = call(executor(), ToolCall("", error="the tool call is not valid JSON"))
    assert result.text.startswith("Error: malformed tool call")
    assert metrics["tool/malformed"] == 1 and metrics["tool/calls"] == 1


def test_unknown_tool_names_the_available_ones() -> None:
    result, metrics = call(executor(), ToolCall("searh", {}))
    assert "unknown tool 'searh'" in result.text and "calculator" in result.text
    assert metrics["tool/unknown"] == 1 and metrics["tool/errors"] == 1


def test_tool_that_raises() -> None:
    result, metrics = call(executor(), ToolCall("raises", {}))
    assert result.text == "Error: tool 'raises' failed: ValueError: boom"
    assert metrics["tool/errors"] == 1


def test_tool_that_hangs_is_timed_out() -> None:
    start = time.perf_counter()
    result, metrics = call(executor(), ToolCall("hangs", {}))
    assert time.perf_counter() - start < 60  # the 3600 s sleep was cut
    assert "timed out after 0.2 s" in result.text
    assert metrics["tool/timeouts"] == 1 and metrics["tool/errors"] == 1


def test_tool_that_prints_10_mb_is_truncated() -> None:
    result, metrics = call(executor(limit=100), ToolCall("floods", {}))
    assert len(result.text) == 100 and "...(truncated)..." in result.text
    assert metrics["tool/truncated"] == 1


@pytest.mark.parametrize("side", ["left", "right", "middle"])
def test_truncate_sides(side: str) -> None:
    text, cut = truncate("a" * 50 + "b" * 50, 40, side)
    assert cut and len(text) == 40
    assert text.startswith("a") == (side != "left") and text.endswith("b") == (side != "right")
    assert truncate("short", 40, side) == ("short", False)


def test_calls_run_concurrently_up_to_max_parallel_calls() -> None:
    ex = executor(max_parallel=3)
    Sleeps.running = Sleeps.peak = 0
    metrics: dict[str, float] = {}

    async def many() -> list[ToolResult]:
        return await asyncio.gather(*(ex.call(f"t{i}", ToolCall("sleeps", {"s": 0.05}), metrics) for i in range(7)))

    results = asyncio.run(many())
    assert Sleeps.peak == 3  # concurrent, and never more than max_parallel_calls
    Sleeps.peak = 0
    asyncio.run(many())  # the next rollout runs its own event loop: the bound still holds there
    assert Sleeps.peak == 3
    assert [r.reward for r in results] == [0.5] * 7
    assert metrics["tool/sleeps/naps"] == 14 and metrics["tool/calls"] == 14


# ------------------------------------------------------------------ built-in tools
def test_calculator_is_exact_and_refuses_code() -> None:
    assert evaluate_arithmetic("123456789*987654321") == 121932631112635269
    assert evaluate_arithmetic("(7+5)//5 - -2**3") == 10
    for bad in ("__import__('os').system('id')", "9**9**9", "1/0", "a+1", ""):
        with pytest.raises(ValueError):
            evaluate_arithmetic(bad)
    result, _ = call(executor(), ToolCall("calculator", {"expression": "open('x')"}))
    assert result.text.startswith("Error:")
    result, _ = call(executor(), ToolCall("calculator", {"expression": "1234*5678"}))
    assert result.text == "7006652"


def test_tool_yaml_class_name_may_be_a_dotted_path(tmp_path: Path) -> None:
    path = tmp_path / "tools.yaml"
    path.write_text(
        "tools:\n  - class_name: rlcore_plugin_agents.builtin_tools.CalculatorTool\n    config: {timeout: 3}\n"
    )
    tool = load_tools(str(path), load_plugins().registry)["calculator"]
    assert isinstance(tool, CalculatorTool) and tool.config == {"timeout": 3}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tools:\n  - class_name: no_such_tool\n", "tools[0]: unknown tool 'no_such_tool'"),
        ("tools:\n  - class_name: my_pkg.missing.Tool\n", "neither a registered tool"),
        ("tools:\n  - config: {}\n", "tools[0]: each tool needs a class_name"),
        ("tool: []\n", "expected a top-level 'tools:' list"),
        ("tools: [\n", "not valid YAML"),
        (
            "tools:\n  - class_name: calculator\n  - class_name: calculator\n",
            "tools[1]: a second tool named 'calculator'",
        ),
    ],
)
def test_bad_tool_yaml_names_the_file_and_entry(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "tools.yaml"
    path.write_text(text)
    with pytest.raises(RLCoreError, match="tools.yaml") as info:
        load_tools(str(path), load_plugins().registry)
    assert message in str(info.value)


def test_missing_tool_yaml() -> None:
    with pytest.raises(RLCoreError, match="multi_turn.tool_config_path=/nonexistent.yaml: no such file"):
        load_tools("/nonexistent.yaml", load_plugins().registry)


# ------------------------------------------------------------------ contract suites of the built-ins


class TestCalculatorContract(ToolContract):
    component_name = "calculator"
    example_arguments = {"expression": "12*34"}


def test_the_qwen_format_is_sglangs_name_for_hermes_blocks() -> None:
    """``multi_turn.format=qwen`` (SGLang's Qwen 2.5 detector): ``<tool_call>\\n{json}\\n</tool_call>`` blocks, one
    per call, after any text: the same blocks as ``hermes``."""
    from rlcore.plugins import get_component

    parser = get_component("tool_parser", "qwen")()
    text = (
        "Let me compute.\n<tool_call>\n"
        '{"name": "calculator", "arguments": {"expression": "1+2"}}\n</tool_call>\n<tool_call>\n'
        '{"name": "calc_gsm8k_reward", "arguments": {"answer": "3"}}\n</tool_call>'
    )
    calls = parser.parse(text)
    assert [(call.name, call.arguments, call.error) for call in calls] == [
        ("calculator", {"expression": "1+2"}, None),
        ("calc_gsm8k_reward", {"answer": "3"}, None),
    ]


class TestHermesContract(ToolParserContract):
    component_name = "hermes"
    example_text = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+2"}}\n</tool_call>'


class FailsToStart(Tool):
    async def create(self, instance_id: str, **kwargs: Any) -> None:
        raise ConnectionError("no server")

    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> str:
        return "answered anyway"


def test_a_tool_whose_create_fails_does_not_stop_the_trajectory() -> None:
    ex = ToolExecutor({"fails": FailsToStart({}, schema("fails"))}, 1, 100, "middle")
    metrics: dict[str, float] = {}

    async def trajectory() -> ToolResult:
        await ex.create("t", {}, metrics)
        result = await ex.call("t", ToolCall("fails", {}), metrics)
        await ex.release("t")
        return result

    assert asyncio.run(trajectory()).text == "answered anyway"
    assert metrics["tool/create_errors"] == 1
