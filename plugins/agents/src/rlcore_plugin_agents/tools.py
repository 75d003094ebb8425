"""verl's tool YAML and the executor that contains misbehaving tools (:class:`~rlcore.api.Tool`: the base class).

A tool's life per trajectory is ``create`` → any number of ``execute`` calls → ``release``. :class:`ToolExecutor` runs the calls of a turn concurrently (at most
``multi_turn.max_parallel_calls`` at once across all trajectories), with a per-tool timeout (the tool
config's ``timeout``, default :data:`DEFAULT_TIMEOUT_S` seconds), cuts long responses to
``multi_turn.max_tool_response_length`` characters, and turns every failure — an unknown name, malformed
arguments, an exception, a timeout — into an error message for the model and a metric, never an exception
that stops the run.

The timeout holds even for a tool that blocks (``time.sleep`` or a blocking client inside ``async def``):
the tools' own ``create``/``execute``/``release`` run on ``max_parallel_calls`` event loops of their own,
on daemon threads (:mod:`rlcore_plugin_agents.tool_threads`; a trajectory keeps one loop from ``create`` to
``release``), and the rollout's loop only waits for them, so a blocked call times out on time, its loop is
replaced, the other trajectories go on, and the stuck thread cannot keep the process from exiting. A tool that leaves ``max_parallel_calls`` calls stuck past their timeout gets no more calls
started until one returns. A tool that calls ``sys.exit()`` stops the run with a
:class:`~rlcore.api.UserCodeExit` naming it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from rlcore.api import MULTI_TURN_KEY, RLCoreError, Tool, ToolCall, ToolResult, UserCodeExit, exit_error, tool_classes
from rlcore_plugin_agents.tool_threads import LoopCall, ToolExit, ToolLoops

if TYPE_CHECKING:
    from rlcore.api import Registry

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_TIMEOUT_S", "ToolExecutor", "load_tools", "truncate"]

#: seconds a tool call may take when its config gives no ``timeout``
DEFAULT_TIMEOUT_S = 30.0


def load_tools(path: str, registry: Registry) -> dict[str, Tool]:
    """The tools of verl's tool YAML at ``path`` (``tools: [{class_name, config, tool_schema}]``) by name, their
    classes resolved in ``registry``. A tool with a ``bind_registry(registry)`` method gets ``registry`` right
    after it is built (the ``search`` tool resolves its retriever there)."""
    tools: dict[str, Tool] = {}
    for where, entry, cls in tool_classes(path, f"{MULTI_TURN_KEY}.tool_config_path", "tools", "tool", registry):
        try:
            tool = cls(entry.get("config") or {}, entry.get("tool_schema"))
            bind = getattr(tool, "bind_registry", None)
            if callable(bind):
                bind(registry)
        except RLCoreError as exc:
            raise RLCoreError(f"{where}: {exc}") from exc
        if tool.name in tools:
            raise RLCoreError(f"{where}: a second tool named {tool.name!r}")
        tools[tool.name] = tool
    return tools


def truncate(text: str, limit: int, side: str) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters on ``side`` (left, right or middle) with a marker; whether it was cut."""
    if len(text) <= limit:
        return text, False
    marker = "...(truncated)..."
    keep = max(limit - len(marker), 0)
    if side == "left":
        return marker + text[len(text) - keep :], True
    if side == "right":
        return text[:keep] + marker, True
    head = keep // 2
    return text[:head] + marker + text[len(text) - (keep - head) :], True


class ToolNotAnswering(Exception):
    """A tool has ``max_parallel_calls`` calls still running past their timeout: no new one is started."""


def _overridden(tool: Tool, method: str) -> bool:
    """Whether ``tool`` defines ``method`` itself rather than inheriting :class:`Tool`'s no-op."""
    return getattr(type(tool), method) is not getattr(Tool, method)


class ToolExecutor:
    """Runs tool calls for all trajectories of a rollout, bounded, timed and contained.

    Args:
        tools: the tools by name.
        max_parallel_calls: how many calls may run at once (over all trajectories).
        max_response_length: responses longer than this many characters are cut (counted in ``tool/truncated``).
        truncate_side: ``left``, ``right`` or ``middle``.
    """

    def __init__(
        self, tools: Mapping[str, Tool], max_parallel_calls: int, max_response_length: int, truncate_side: str
    ) -> None:
        self.tools = dict(tools)
        self.max_parallel_calls = max_parallel_calls
        self.max_response_length = max_response_length
        self.truncate_side = truncate_side
        self._semaphores: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}
        self._loops = ToolLoops(max_parallel_calls)
        self._stuck: dict[str, list[LoopCall]] = {}  # tool name -> its calls still running past their timeout

    def _limit(self) -> asyncio.Semaphore:
        """The ``max_parallel_calls`` semaphore of the running event loop (each rollout runs its own loop)."""
        loop = asyncio.get_running_loop()
        if loop not in self._semaphores:
            self._semaphores = {loop: asyncio.Semaphore(self.max_parallel_calls)}
        return self._semaphores[loop]

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI schemas of all tools (for the chat template's ``tools``)."""
        return [tool.openai_schema() for tool in self.tools.values()]

    async def create(self, instance_id: str, tools_kwargs: Mapping[str, Any], metrics: dict[str, float]) -> None:
        """Create every tool's instance for one trajectory. A tool whose ``create`` fails is logged and counted
        in ``tool/create_errors``; its calls then get whatever the tool answers without an instance."""
        for name, tool in self.tools.items():
            kwargs = (
                (tools_kwargs.get(name) or {}).get("create_kwargs", {}) if isinstance(tools_kwargs, Mapping) else {}
            )
            if not _overridden(tool, "create"):
                continue
            try:
                await self._guarded(tool, instance_id, tool.create(instance_id, **dict(kwargs)))
            except UserCodeExit:
                raise
            except Exception as exc:  # noqa: BLE001 - one tool's failure must not stop the rollout
                log.warning("tool %r: create failed for %s: %s: %s", name, instance_id, type(exc).__name__, exc)
                metrics["tool/create_errors"] = metrics.get("tool/create_errors", 0.0) + 1

    async def release(self, instance_id: str) -> None:
        """Release every tool's instance for one trajectory (failures are ignored: the trajectory is done),
        then the trajectory's thread."""
        try:
            for tool in self.tools.values():
                if not _overridden(tool, "release"):
                    continue
                try:
                    await self._guarded(tool, instance_id, tool.release(instance_id))
                except UserCodeExit:
                    raise
                except Exception:  # noqa: BLE001 - a failing release must not stop the rollout
                    continue
        finally:
            self._loops.release(instance_id)

    def _stuck_calls(self, tool: Tool) -> int:
        """How many of ``tool``'s calls are still running past their timeout."""
        stuck = [call for call in self._stuck.get(tool.name, []) if not call.finished.is_set()]
        self._stuck[tool.name] = stuck
        return len(stuck)

    async def _guarded(self, tool: Tool, instance_id: str, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run one of ``tool``'s coroutines on the trajectory's tool loop and wait at most the tool's timeout
        for it (``TimeoutError`` then: the coroutine is cancelled, and a blocked one is left to finish on its
        own). A tool with ``max_parallel_calls`` calls stuck past their timeout gets :class:`ToolNotAnswering`
        instead. ``SystemExit`` and ``KeyboardInterrupt`` from the tool become
        :class:`~rlcore.usercode.UserCodeExit`."""
        stuck = self._stuck_calls(tool)
        if stuck >= self.max_parallel_calls:
            coroutine.close()
            raise ToolNotAnswering(
                f"tool {tool.name!r} is not answering: {stuck} earlier calls are still running past their timeout"
            )
        timeout = float(tool.config.get("timeout", DEFAULT_TIMEOUT_S))
        call = self._loops.submit(instance_id, coroutine)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(call.future), timeout)
        except TimeoutError:
            call.time_out()
            self._stuck.setdefault(tool.name, []).append(call)
            raise
        except asyncio.CancelledError:  # the trajectory was aborted (over_sample_rate): so is its tool call
            call.cancel()
            raise
        except ToolExit as exc:  # a signal never reaches that thread: the tool raised it
            what = f"tool {tool.name!r} ({type(tool).__module__}.{type(tool).__qualname__})"
            raise exit_error(exc.original, what) from None

    async def call(self, instance_id: str, call: ToolCall, metrics: dict[str, float]) -> ToolResult:
        """Run one parsed call; every failure becomes an ``Error: ...`` response and a count in ``metrics``."""

        def count(key: str, value: float = 1.0) -> None:
            metrics[key] = metrics.get(key, 0.0) + value

        count("tool/calls")
        if call.error is not None:
            count("tool/malformed")
            return ToolResult(f"Error: malformed tool call: {call.error}")
        tool = self.tools.get(call.name)
        if tool is None:
            count("tool/errors")
            count("tool/unknown")
            known = ", ".join(sorted(self.tools)) or "none"
            return ToolResult(f"Error: unknown tool {call.name!r}; available tools: {known}")
        start = time.perf_counter()
        async with self._limit():
            try:
                result = await self._guarded(tool, instance_id, tool.execute(instance_id, call.arguments))
            except UserCodeExit:
                raise
            except ToolNotAnswering as exc:
                count("tool/errors")
                result = ToolResult(f"Error: {exc}; the call was not started")
            except TimeoutError:
                count("tool/errors")
                count("tool/timeouts")
                result = ToolResult(
                    f"Error: tool {call.name!r} timed out after {tool.config.get('timeout', DEFAULT_TIMEOUT_S)} s"
                )
            except Exception as exc:  # noqa: BLE001 - a tool's failure is the model's feedback, not a crash
                count("tool/errors")
                result = ToolResult(f"Error: tool {call.name!r} failed: {type(exc).__name__}: {exc}")
        count("tool/time_s", time.perf_counter() - start)
        if isinstance(result, str):
            result = ToolResult(result)
        elif not isinstance(result, ToolResult):
            count("tool/errors")
            result = ToolResult(f"Error: tool {call.name!r} returned {type(result).__name__}, not text")
        text, cut = truncate(str(result.text), self.max_response_length, self.truncate_side)
        if cut:
            count("tool/truncated")
        for key, value in result.metrics.items():
            count(f"tool/{call.name}/{key}", float(value))
        return ToolResult(text, result.reward, result.metrics)
