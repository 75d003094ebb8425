"""A tool that blocks inside ``async def`` (``time.sleep`` instead of ``await``) times out as configured: its
calls run on threads of their own, the rollout's event loop and the other calls go on, a tool stuck past its
timeout gets no more calls, and a stuck call cannot keep the process from exiting."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from rlcore_plugin_agents.tools import ToolExecutor
from rlcore_testkit.contracts.chat_templates import tool_chat_pair
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.api import Tool, ToolCall, ToolResult


def schema(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


class Blocks(Tool):
    """Blocks its thread (and, before, the rollout's event loop) for ``arguments["s"]`` seconds."""

    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> str:
        time.sleep(arguments.get("s", 30))
        return "late"


class Answers(Tool):
    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> ToolResult:
        await asyncio.sleep(0.05)
        return ToolResult("ok")


def executor(max_parallel: int = 4) -> ToolExecutor:
    return ToolExecutor(
        {"blocks": Blocks({"timeout": 0.5}, schema("blocks")), "answers": Answers({}, schema("answers"))},
        max_parallel,
        1000,
        "middle",
    )


def test_a_blocking_tool_times_out_on_time_and_other_calls_go_on() -> None:
    ex = executor()
    metrics: dict[str, float] = {}

    async def turn() -> tuple[list[ToolResult], list[float]]:
        start = time.perf_counter()
        done: list[float] = []

        async def timed(trajectory: str, call: ToolCall) -> ToolResult:
            result = await ex.call(trajectory, call, metrics)
            done.append(time.perf_counter() - start)
            return result

        results = await asyncio.gather(timed("t0", ToolCall("blocks", {"s": 20})), timed("t1", ToolCall("answers", {})))
        return list(results), done

    (blocked, answered), done = asyncio.run(turn())
    assert blocked.text == "Error: tool 'blocks' timed out after 0.5 s"
    assert answered.text == "ok"
    assert min(done) < 0.5, "the other trajectory's call was not held up by the blocked one"
    assert max(done) < 10, "the blocked call was cut at its timeout (it sleeps 20 s)"
    assert metrics["tool/timeouts"] == 1


def test_a_tool_stuck_past_its_timeout_gets_no_more_calls() -> None:
    ex = executor(max_parallel=2)
    metrics: dict[str, float] = {}
    for _ in range(2):
        result = asyncio.run(ex.call("t0", ToolCall("blocks", {"s": 20}), metrics))
        assert "timed out" in result.text
    start = time.perf_counter()
    refused = asyncio.run(ex.call("t0", ToolCall("blocks", {"s": 20}), metrics))
    assert time.perf_counter() - start < 0.4
    assert refused.text == (
        "Error: tool 'blocks' is not answering: 2 earlier calls are still running past their timeout; "
        "the call was not started"
    )
    assert asyncio.run(ex.call("t1", ToolCall("answers", {}), metrics)).text == "ok", "other tools still answer"


class Session(Tool):
    """Opens a per-trajectory resource in ``create`` on the loop it runs on; ``execute`` needs the same loop."""

    loops: dict[str, asyncio.AbstractEventLoop] = {}

    async def create(self, instance_id: str, **kwargs: Any) -> None:
        self.loops[instance_id] = asyncio.get_running_loop()

    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> str:
        same = asyncio.get_running_loop() is self.loops[instance_id]
        return "same loop as create" if same else "another loop"

    async def release(self, instance_id: str) -> None:
        assert asyncio.get_running_loop() is self.loops.pop(instance_id)


def test_a_trajectorys_calls_share_one_event_loop_from_create_to_release() -> None:
    ex = ToolExecutor({"session": Session({"timeout": 10}, schema("session"))}, 4, 100, "middle")

    async def trajectory(iid: str) -> str:
        await ex.create(iid, {}, {})
        result = await ex.call(iid, ToolCall("session", {}), {})
        await ex.release(iid)
        return result.text

    async def rollout() -> list[str]:
        return list(await asyncio.gather(*(trajectory(f"t{i}") for i in range(4))))

    assert asyncio.run(rollout()) == ["same loop as create"] * 4
    assert asyncio.run(rollout()) == ["same loop as create"] * 4, "threads are reused by later trajectories"
    assert Session.loops == {}, "release ran on the same loop too"


def test_a_tool_that_stops_at_its_next_await_is_cancelled_at_the_timeout() -> None:
    """A cooperative tool is cancelled when its call times out, as it was before calls had threads."""
    finished = threading.Event()

    class Cooperative(Tool):
        async def execute(self, instance_id: str, arguments: dict[str, Any]) -> str:
            try:
                await asyncio.sleep(30)
            finally:
                finished.set()
            return "late"

    ex = ToolExecutor({"c": Cooperative({"timeout": 0.2}, schema("c"))}, 1, 100, "middle")
    assert "timed out" in asyncio.run(ex.call("t0", ToolCall("c", {}), {})).text
    assert finished.wait(10), "its finally block ran"


def test_a_stuck_tool_call_does_not_keep_the_process_from_exiting() -> None:
    code = textwrap.dedent(
        """
        import asyncio, time
        from rlcore.api import ToolCall
        from rlcore.api import Tool
        from rlcore_plugin_agents.tools import ToolExecutor

        class Blocks(Tool):
            async def execute(self, instance_id, arguments):
                time.sleep(300)

        schema = {"type": "function", "function": {"name": "blocks", "parameters": {"type": "object"}}}
        ex = ToolExecutor({"blocks": Blocks({"timeout": 0.5}, schema)}, 1, 100, "middle")
        print(asyncio.run(ex.call("t0", ToolCall("blocks", {}), {})).text, flush=True)
        """
    )
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Error: tool 'blocks' timed out after 0.5 s"
    assert time.monotonic() - start < 60


BLOCKING_CALCULATOR = '''
import time
from rlcore_plugin_agents.builtin_tools import CalculatorTool


class BlockingCalculator(CalculatorTool):
    """The calculator, but it blocks its event loop (time.sleep in async def) for 20 s per trajectory and call."""

    async def create(self, instance_id, **kwargs):
        time.sleep(20)

    async def execute(self, instance_id, arguments):
        time.sleep(20)
        return await super().execute(instance_id, arguments)
'''


def test_a_multi_turn_run_with_a_blocking_tool_finishes_with_timeouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir = tmp_path / "qwen-tools"
    tokenizer, model = tool_chat_pair("qwen2.5")
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    (tmp_path / "blocking_tools.py").write_text(BLOCKING_CALCULATOR)
    monkeypatch.syspath_prepend(str(tmp_path))
    tools = tmp_path / "tools.yaml"
    tools.write_text("tools:\n  - class_name: blocking_tools.BlockingCalculator\n    config: {timeout: 1}\n")
    start = time.monotonic()
    _, run_dir = tiny_run(
        tmp_path,
        model_dir,
        make_tiny_task(tmp_path / "task"),
        "data.max_prompt_length=128",
        "data.max_response_length=96",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
        "data.return_raw_chat=false",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
    )
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    assert [row["tool/create_errors"] for row in rows] == [16, 16], "every trajectory's create timed out, and went on"
    assert time.monotonic() - start < 240, "32 trajectories blocking 20 s each in turn would take 640 s"
