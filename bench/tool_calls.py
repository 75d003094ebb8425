"""What running tool calls on their own event loops costs: the wall time per call of a tool that returns at
once, through ``ToolExecutor`` (create, calls and release per trajectory on the trajectory's tool loop,
``max_parallel_calls`` loops) and awaited directly on the rollout's loop (what a tool cost before calls had
loops of their own), over ``--trajectories`` concurrent trajectories of ``--calls`` calls each.

Prints one JSON object. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

from rlcore_plugin_agents.tools import ToolExecutor

from rlcore.api import Tool, ToolCall

SCHEMA = {"type": "function", "function": {"name": "echo", "parameters": {"type": "object"}}}


class Echo(Tool):
    """Answers at once, with per-trajectory ``create``/``release`` (so each trajectory uses its loop)."""

    async def create(self, instance_id: str, **kwargs: Any) -> None:
        return None

    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> str:
        return "ok"

    async def release(self, instance_id: str) -> None:
        return None


async def through_executor(executor: ToolExecutor, trajectories: int, calls: int) -> None:
    async def trajectory(i: int) -> None:
        metrics: dict[str, float] = {}
        await executor.create(f"t{i}", {}, metrics)
        for _ in range(calls):
            await executor.call(f"t{i}", ToolCall("echo", {}), metrics)
        await executor.release(f"t{i}")

    await asyncio.gather(*(trajectory(i) for i in range(trajectories)))


async def directly(tool: Tool, trajectories: int, calls: int) -> None:
    async def trajectory(i: int) -> None:
        await asyncio.wait_for(tool.create(f"t{i}"), 30)
        for _ in range(calls):
            await asyncio.wait_for(tool.execute(f"t{i}", {}), 30)
        await asyncio.wait_for(tool.release(f"t{i}"), 30)

    await asyncio.gather(*(trajectory(i) for i in range(trajectories)))


def main() -> None:
    """Parse the arguments, time both ways ``--repeats`` times, print the medians."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trajectories", type=int, default=256)
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--max-parallel-calls", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if min(args.trajectories, args.calls, args.max_parallel_calls, args.repeats) < 1:
        print("error: --trajectories, --calls, --max-parallel-calls and --repeats must be >= 1", file=sys.stderr)
        sys.exit(2)
    tool = Echo({}, SCHEMA)
    executor = ToolExecutor({"echo": tool}, args.max_parallel_calls, 1000, "middle")
    per_call: dict[str, list[float]] = {"executor": [], "direct": []}
    total_calls = args.trajectories * (args.calls + 2)
    for _ in range(args.repeats + 1):  # the first round warms up
        for name, work in (
            ("executor", lambda: through_executor(executor, args.trajectories, args.calls)),
            ("direct", lambda: directly(tool, args.trajectories, args.calls)),
        ):
            start = time.perf_counter()
            asyncio.run(work())
            per_call[name].append((time.perf_counter() - start) / total_calls * 1e6)
    result = {
        "trajectories": args.trajectories,
        "calls_per_trajectory": args.calls,
        "max_parallel_calls": args.max_parallel_calls,
        "us_per_call_executor": round(statistics.median(per_call["executor"][1:]), 1),
        "us_per_call_direct": round(statistics.median(per_call["direct"][1:]), 1),
    }
    result["us_added_per_call"] = round(result["us_per_call_executor"] - result["us_per_call_direct"], 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
