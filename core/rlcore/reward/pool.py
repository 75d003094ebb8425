"""Scorer processes that a hung or spinning scorer cannot stall: timeouts kill, samples run concurrently.

A scorer is user code run on model output. :class:`ScorerPool` runs it in worker processes forked from the
controller (so a scorer loaded from a file, registered in memory or defined in a test needs no pickling),
scores the samples of a batch concurrently on up to ``workers`` processes, and:

- kills (SIGKILL) a worker whose sample runs past ``timeout`` seconds — the sample is a ``timeout`` and a
  fresh worker takes over, so a busy loop stops burning CPU at its deadline;
- stops the whole batch at ``batch_timeout`` seconds: running samples are killed, samples not yet started
  are ``timeout`` too, so a batch never takes longer than that;
- stops at the first outcome a ``stop`` predicate flags (fail-fast), killing the samples in flight;
- reports a worker that dies (a segfault, ``os._exit``) as an ``error`` of its sample.

Workers are started on first use and kept for later batches; :meth:`ScorerPool.close` ends them (they are
daemon processes, and a worker whose controller died exits when its pipe closes).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from rlcore.errors import RLCoreError

#: an outcome kind: the scorer returned (``ok``), raised or died (``error``), or ran out of time (``timeout``)
KINDS = ("ok", "error", "timeout")


@dataclass
class Outcome:
    """The result of one scorer call: ``kind`` is ``ok`` (``value`` = the return value), ``error``
    (``value`` = the exception) or ``timeout`` (``value`` = what ran out: ``"sample"`` or ``"batch"``)."""

    kind: str
    value: Any = None


class ScorerProcessError(RuntimeError):
    """A scorer's worker process died, or its exception or return value could not be sent back."""


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else an equivalent that does (an :class:`RLCoreError` stays one)."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any pickling failure
        cls = RLCoreError if isinstance(exc, RLCoreError) else ScorerProcessError
        return cls(f"{type(exc).__name__}: {exc}")


def _die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this process when the controller dies (even a hung scorer)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the closed pipe still ends an idle worker
        pass


def _serve(fn: Callable[..., Any], conn: Connection, inherited: list[Connection]) -> None:
    """A worker's loop: receive ``(index, kwargs)``, send back ``(index, kind, value)``; exit on EOF.

    ``inherited`` are the controller's pipe ends this forked process holds copies of (its own pipe's and the
    other workers'): they are closed so that the pipe reports EOF as soon as the controller is gone.
    """
    _die_with_parent()
    for end in inherited:
        end.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the controller's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the controller's stop handler: terminate() must end it
    while True:
        try:
            index, kwargs = conn.recv()
        except (EOFError, OSError):
            return
        try:
            result: tuple[int, str, Any] = (index, "ok", fn(**kwargs))
        except BaseException as exc:  # noqa: BLE001 - a scorer failure is its sample's, not the worker's
            result = (index, "error", _portable(exc))
        try:
            conn.send(result)
        except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable return value
            conn.send((index, "error", ScorerProcessError(f"the return value cannot be sent back: {exc}")))


class _Worker:
    """One forked worker process and the controller's end of its pipe."""

    def __init__(self, context: Any, fn: Callable[..., Any], others: list[_Worker]) -> None:
        self.conn, child = context.Pipe()
        inherited = [self.conn, *(w.conn for w in others)]
        self.process = context.Process(target=_serve, args=(fn, child, inherited), name="rlcore-scorer", daemon=True)
        self.process.start()
        child.close()
        self.task: tuple[int, float] | None = None  # (sample index, start time) while busy

    def kill(self) -> None:
        """SIGKILL the process and reap it."""
        if self.process.is_alive():
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(5)
        self.conn.close()


class ScorerPool:
    """Calls ``fn(**kwargs)`` for a list of keyword sets in worker processes, with hard time limits.

    Args:
        fn: the scorer; it is inherited by forked workers, never pickled. Its arguments and return values
            are sent through pipes, so they must pickle (plain data, as a scorer's are).
        workers: the most processes scoring at once.
        timeout: seconds one call may run before its process is killed (None or <= 0: no limit).
        batch_timeout: seconds one :meth:`map` may run (None or <= 0: no limit).
    """

    def __init__(
        self, fn: Callable[..., Any], workers: int, timeout: float | None, batch_timeout: float | None = None
    ) -> None:
        self.fn = fn
        self.size = max(1, int(workers))
        self.timeout = timeout if timeout and timeout > 0 else None
        self.batch_timeout = batch_timeout if batch_timeout and batch_timeout > 0 else None
        self._context = multiprocessing.get_context("fork")
        self._workers: list[_Worker] = []

    def map(
        self, calls: list[Mapping[str, Any]], stop: Callable[[Outcome], bool] | None = None
    ) -> list[Outcome | None]:
        """One :class:`Outcome` per call, in order; see the module docstring for the limits.

        ``stop(outcome)`` returning true for an outcome stops the scoring there (the calls in flight are
        killed): the calls not finished then are ``None``.
        """
        outcomes: list[Outcome | None] = [None] * len(calls)
        pending = deque(range(len(calls)))
        deadline = time.monotonic() + self.batch_timeout if self.batch_timeout else None
        while pending or self._busy():
            self._dispatch(pending, calls)
            busy = self._busy()
            now = time.monotonic()
            limits = [start + self.timeout for _, (_, start) in busy] if self.timeout else []
            if deadline is not None:
                limits.append(deadline)
            wait_s = max(0.0, min(limits) - now) if limits else None
            ready = wait([w.conn for w, _ in busy] + [w.process.sentinel for w, _ in busy], wait_s)
            stopped = False
            for worker, (index, start) in busy:
                outcome = self._poll(worker, ready)
                if outcome is None and self.timeout and time.monotonic() - start >= self.timeout:
                    outcome = Outcome("timeout", "sample")
                    self._retire(worker)
                if outcome is not None:
                    outcomes[index] = outcome
                    worker.task = None
                    stopped = stopped or (stop is not None and stop(outcome))
            if stopped:
                self._abandon()
                return outcomes
            if deadline is not None and time.monotonic() >= deadline:
                for _worker, (index, _) in self._busy():
                    outcomes[index] = Outcome("timeout", "batch")
                self._abandon()
                for index in pending:
                    outcomes[index] = Outcome("timeout", "batch")
                return outcomes
        return outcomes

    def close(self) -> None:
        """End every worker process (idempotent)."""
        for worker in self._workers:
            worker.kill()
        self._workers = []

    # ----------------------------------------------------------------- internals
    def _busy(self) -> list[tuple[_Worker, tuple[int, float]]]:
        return [(w, w.task) for w in self._workers if w.task is not None]

    def _dispatch(self, pending: deque[int], calls: list[Mapping[str, Any]]) -> None:
        """Hand pending calls to idle workers, starting workers up to the pool size."""
        while pending:
            worker = next((w for w in self._workers if w.task is None), None)
            if worker is None and len(self._workers) < self.size:
                worker = _Worker(self._context, self.fn, self._workers)
                self._workers.append(worker)
            if worker is None:
                return
            index = pending.popleft()
            try:
                worker.conn.send((index, dict(calls[index])))
            except (OSError, pickle.PicklingError, TypeError, AttributeError) as exc:
                if isinstance(exc, OSError):  # the worker died between calls: replace it and retry
                    self._retire(worker)
                    pending.appendleft(index)
                    continue
                raise RLCoreError(f"cannot send sample {index}'s arguments to a scorer process: {exc}") from exc
            worker.task = (index, time.monotonic())

    def _poll(self, worker: _Worker, ready: list[Any]) -> Outcome | None:
        """The outcome a worker sent, an error when its process died, or None while it is still working."""
        if worker.conn in ready or worker.conn.poll():
            try:
                _, kind, value = worker.conn.recv()
                return Outcome(kind, value)
            except (EOFError, OSError):
                pass
            except Exception as exc:  # noqa: BLE001 - a value that cannot be unpickled here
                return Outcome("error", ScorerProcessError(f"the scorer's result cannot be read: {exc}"))
        if worker.process.sentinel in ready or not worker.process.is_alive():
            worker.process.join(1)
            code = worker.process.exitcode
            self._retire(worker)
            how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            return Outcome("error", ScorerProcessError(f"the scorer's process died ({how})"))
        return None

    def _retire(self, worker: _Worker) -> None:
        """Kill a worker and drop it from the pool (a new one is started when needed)."""
        worker.kill()
        worker.task = None
        if worker in self._workers:
            self._workers.remove(worker)

    def _abandon(self) -> None:
        """Kill the workers that are still scoring."""
        for worker, _ in self._busy():
            self._retire(worker)
