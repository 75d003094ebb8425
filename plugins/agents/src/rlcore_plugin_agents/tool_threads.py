"""Tool coroutines on event loops of their own, so that a tool that blocks cannot stall the rollout.

A tool written as ``async def`` may still block (``time.sleep``, a blocking HTTP client): on the rollout's
event loop that would stop every trajectory, and no ``asyncio`` timeout could fire. Here tool calls
(``create``, ``execute``, ``release``) run on :class:`ToolLoops`: a few daemon threads, each with an event
loop of its own (as many as ``max_parallel_calls``). A trajectory keeps one loop for its whole life, so that
per-trajectory ``asyncio`` resources (a client session opened in ``create``) keep working. The rollout's
loop only waits for the outcome (:class:`LoopCall`), with the tool's timeout. A loop with a call stuck past
its timeout is retired — left to finish that call on its own, never given new work — and replaced.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any


class ToolExit(Exception):
    """A tool coroutine raised ``SystemExit`` or ``KeyboardInterrupt`` (:attr:`original`): carried as an
    ordinary exception so that its loop keeps running."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(repr(original))
        self.original = original


async def _contained(coroutine: Coroutine[Any, Any, Any]) -> Any:
    try:
        return await coroutine
    except (SystemExit, KeyboardInterrupt) as exc:  # would stop the loop itself
        raise ToolExit(exc) from exc


class LoopCall:
    """One coroutine submitted to a :class:`LoopThread`: :attr:`future` holds its outcome, :attr:`finished`
    is set when it has really ended (also after the waiting side gave up on it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.finished = threading.Event()
        self.timed_out = False
        self._loop = loop
        self._task: asyncio.Task[Any] | None = None

    def start(self, coroutine: Coroutine[Any, Any, Any], context: contextvars.Context) -> None:
        """In the loop's thread: run the coroutine as a task in ``context``."""
        self._task = self._loop.create_task(_contained(coroutine), context=context)
        self._task.add_done_callback(self._copy)

    def _copy(self, task: asyncio.Task[Any]) -> None:
        self.finished.set()
        if self.future.done():  # the waiting side cancelled it
            return
        if task.cancelled():
            self.future.cancel()
        elif task.exception() is not None:
            self.future.set_exception(task.exception())
        else:
            self.future.set_result(task.result())

    def time_out(self) -> None:
        """The waiting side gave up at the timeout: :meth:`cancel`; a blocking call goes on, and its loop counts
        as blocked until it ends."""
        self.timed_out = True
        self.cancel()

    def cancel(self) -> None:
        """Ask the coroutine to stop (at its next ``await``)."""
        try:
            self._loop.call_soon_threadsafe(self._cancel)
        except RuntimeError:  # its loop is closed: it has ended
            pass

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()


class LoopThread:
    """A daemon thread running an event loop of its own; it never keeps the process from exiting."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.calls: list[LoopCall] = []
        self._thread = threading.Thread(target=self._serve, name="rlcore-tools", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def submit(self, coroutine: Coroutine[Any, Any, Any]) -> LoopCall:
        """Run ``coroutine`` on this thread's loop, in a copy of the caller's context variables."""
        call = LoopCall(self.loop)
        self.calls = [c for c in self.calls if not c.finished.is_set()] + [call]
        self.loop.call_soon_threadsafe(call.start, coroutine, contextvars.copy_context())
        return call

    @property
    def blocked(self) -> bool:
        """Whether a call here timed out and has not ended: whatever is queued behind it waits."""
        return any(call.timed_out and not call.finished.is_set() for call in self.calls)

    def stop(self) -> None:
        """End the thread once the calls queued now have run."""
        self.loop.call_soon_threadsafe(self.loop.stop)


class ToolLoops:
    """``size`` loop threads for tool calls; each trajectory (instance id) keeps the one it got first.

    A blocked loop (:attr:`LoopThread.blocked`) is retired when work would next go to it, and a fresh one
    takes its place (a trajectory assigned to it then continues on the fresh loop).
    """

    def __init__(self, size: int) -> None:
        self._slots: list[LoopThread | None] = [None] * max(1, size)
        self._by_instance: dict[str, int] = {}
        self._next = 0
        self._lock = threading.Lock()

    def submit(self, instance_id: str, coroutine: Coroutine[Any, Any, Any]) -> LoopCall:
        """Run ``coroutine`` on the trajectory's loop."""
        with self._lock:
            slot = self._by_instance.get(instance_id)
            if slot is None:
                slot = self._by_instance[instance_id] = self._next
                self._next = (self._next + 1) % len(self._slots)
            thread = self._slots[slot]
            if thread is None or thread.blocked:
                if thread is not None:
                    thread.stop()  # after its stuck call; nothing new goes there
                thread = self._slots[slot] = LoopThread()
            return thread.submit(coroutine)

    def release(self, instance_id: str) -> None:
        """The trajectory is done."""
        with self._lock:
            self._by_instance.pop(instance_id, None)
