"""Scorer processes that a hung or spinning scorer cannot stall: timeouts kill, samples run concurrently.

A scorer is user code run on model output. :class:`ScorerPool` runs it in worker processes forked from the
controller (so a scorer loaded from a file, registered in memory or defined in a test needs no pickling),
scores the samples of a batch concurrently on up to ``workers`` processes, and:

- kills (SIGKILL) a worker whose sample runs past ``timeout`` seconds — the sample is a ``timeout`` and a
  fresh worker takes over, so a busy loop stops burning CPU at its deadline;
- stops the whole batch at ``batch_timeout`` seconds: running samples are killed, samples not yet started
  are ``timeout`` too, so a batch never takes longer than that;
- stops at the first outcome a ``stop`` predicate flags (fail-fast), killing the samples in flight;
- reports a worker that dies (a segfault, ``os._exit``) as an ``error`` of its sample;
- reports a scorer that calls ``sys.exit()`` (or raises ``KeyboardInterrupt``) as a
  :class:`~rlcore.usercode.UserCodeExit` naming the line, an error that stops the run.

Each worker is the leader of its own process group (``setsid``) and the child subreaper of what its scorer
starts (an orphan is re-parented to the worker, not to init); killing a worker kills it and every process
below it (:func:`rlcore.child_processes.kill_tree`), and its group, so whatever a scorer started (a child
process, a shell pipeline, a helper started in a session of its own, a daemon) ends with it. The workers'
stdout and stderr are pipes read by an :class:`~rlcore.reward.output.OutputRelay` (at most ``output_bytes``
per batch reach the run's own output), so no scorer's child holds the run's stdout.

Every sample sent to a worker carries a request id (the batch's number and the sample's index) and every
reply names the request it answers: a reply for anything but the sample the worker is scoring (a scorer that
forked and whose child wrote on the pipe) is a :class:`ScorerReplyError` naming the scorer, which stops the
run, instead of another sample's score. A process that a scorer forks and that returns into the worker's
loop (no ``os._exit`` in the child) ends there without replying.

Samples are sent in chunks, so that a batch of fast samples costs one pipe message per worker rather than
one round trip per sample: the pending samples are dealt round-robin over the workers free (so each gets
about ``ceil(pending / free workers)``, at most :data:`MAX_CHUNK`, and a prompt's neighbouring samples run
on different workers); a worker gets its chunk in one message, scores it in order and sends each outcome
back as soon as it has it. The limits stay per sample: a sample's clock starts when its worker starts it (at
dispatch for the first of a chunk, when the previous outcome arrives for the others), and the samples of a
chunk not finished when its worker is killed or dies go back to the front of the queue, in order, for other
or fresh workers.

Workers are started on first use and kept for later batches; :meth:`ScorerPool.close` ends them and their
process groups (so do the controller's exit and the stop watchdog's forced exit); a worker whose controller
was killed is killed by the kernel (``PR_SET_PDEATHSIG``), but what it started outlives it then.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import pickle
import signal
import sys
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import ForkingPickler
from typing import Any

from rlcore.child_processes import become_subreaper, kill_tree, mark_infrastructure
from rlcore.errors import RLCoreError
from rlcore.graceful_stop import at_hard_exit
from rlcore.reward.output import OutputRelay
from rlcore.usercode import EXIT_EXCEPTIONS, exit_error, real_os_exit

logger = logging.getLogger(__name__)

#: an outcome kind: the scorer returned (``ok``), raised or died (``error``), or ran out of time (``timeout``)
KINDS = ("ok", "error", "timeout")

#: the most samples sent to a worker in one message
MAX_CHUNK = 64


@dataclass
class Outcome:
    """The result of one scorer call: ``kind`` is ``ok`` (``value`` = the return value), ``error``
    (``value`` = the exception) or ``timeout`` (``value`` = what ran out: ``"sample"`` or ``"batch"``)."""

    kind: str
    value: Any = None


class ScorerProcessError(RuntimeError):
    """A scorer's worker process died, or its exception or return value could not be sent back."""


class ScorerReplyError(RLCoreError):
    """A scorer process sent a reply for another request than the one it was scoring: the scores of the batch
    cannot be trusted (it stops the run)."""


#: a request sent to a worker: (the pool's batch number, the sample's index in the batch)
Request = tuple[int, int]


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else an equivalent that does (an :class:`RLCoreError` stays one)."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any pickling failure
        cls = RLCoreError if isinstance(exc, RLCoreError) else ScorerProcessError
        return cls(f"{type(exc).__name__}: {exc}")


def _picklable(value: Any) -> bool:
    """Whether ``value`` can be sent through a pipe."""
    try:
        ForkingPickler.dumps(value)
        return True
    except Exception:  # noqa: BLE001 - any pickling failure
        return False


def _die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this process when the controller dies (even a hung scorer)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the closed pipe still ends an idle worker
        pass


def scorer_label(kwargs: Mapping[str, Any]) -> str:
    """``the reward scorer (data_source 'gsm8k')`` for one call's keyword arguments."""
    source = kwargs.get("data_source")
    if source is None and kwargs.get("data_sources"):
        source = kwargs["data_sources"][0]
    return "the reward scorer" + (f" (data_source {source!r})" if source is not None else "")


def _redirect_output(child_fds: tuple[int, int]) -> None:
    """Make fd 1 and 2 (and ``sys.stdout``/``sys.stderr``) the relay's pipes."""
    for fd, target in zip(child_fds, (1, 2)):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False, errors="replace")  # noqa: SIM115 - fd 1 lives on
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115


def _serve(
    fn: Callable[..., Any],
    conn: Connection,
    inherited: list[Connection],
    child_fds: tuple[int, int],
    parent_fds: tuple[int, ...],
) -> None:
    """A worker's loop: receive a chunk (a list of ``(request, kwargs)``), send back ``(request, kind, value)``
    for each call as soon as it returns, in order; exit on EOF. A process forked by the scorer that returns
    here ends without replying.

    ``inherited`` are the controller's pipe ends this forked process holds copies of (its own pipe's and the
    other workers'): they are closed so that the pipe reports EOF as soon as the controller is gone; so are
    ``parent_fds`` (the relay's read ends). The process becomes the leader of a new session (its own process
    group) and the subreaper of what the scorer starts, and writes its output to ``child_fds``.
    """
    os.setsid()
    _die_with_parent()
    become_subreaper()
    me = os.getpid()
    signal.set_wakeup_fd(-1)  # the controller's stop watchdog listens there, not to this process's signals
    for end in inherited:
        end.close()
    for fd in parent_fds:
        os.close(fd)
    _redirect_output(child_fds)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the controller's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the controller's stop handler: terminate() must end it
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        for request, kwargs in chunk:
            try:
                result: tuple[str, Any] = ("ok", fn(**kwargs))
            except EXIT_EXCEPTIONS as exc:  # SIGINT is ignored here: any KeyboardInterrupt is the scorer's own
                result = ("error", exit_error(exc, scorer_label(kwargs)))
            except BaseException as exc:  # noqa: BLE001 - a scorer failure is its sample's, not the worker's
                result = ("error", _portable(exc))
            if os.getpid() != me:  # a child the scorer forked, back here: only the worker answers
                real_os_exit(0)
            try:
                conn.send((request, *result))
            except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable return value
                conn.send((request, "error", ScorerProcessError(f"the return value cannot be sent back: {exc}")))


class _Worker:
    """One forked worker process, the controller's end of its pipe and the chunk it is scoring."""

    def __init__(self, context: Any, fn: Callable[..., Any], others: list[_Worker], relay: OutputRelay) -> None:
        self.conn, child = context.Pipe()
        inherited = [self.conn, *(w.conn for w in others)]
        self.process = context.Process(
            target=_serve,
            args=(fn, child, inherited, relay.child_fds, relay.parent_fds),
            name="rlcore-scorer",
            daemon=True,
        )
        self.process.start()
        if self.process.pid is not None:
            mark_infrastructure(self.process.pid)
        self.sentinel = self.process.sentinel  # readable once the process has ended
        child.close()
        self.chunk: deque[int] = deque()  # the sample indices sent and not answered yet; the first is running
        self.start = 0.0  # when the running sample started

    def kill_group(self, wait: bool = False) -> None:
        """SIGKILL the process, every process below it and its process group (what the scorer started); with
        ``wait``, wait until those below it are gone (the caller reaps the worker)."""
        pid = self.process.pid
        if pid is None:
            return
        kill_tree(pid, wait=wait)
        try:
            os.killpg(pid, signal.SIGKILL)  # the group id is the worker's pid (setsid)
        except (ProcessLookupError, PermissionError):
            pass
        if self.process.is_alive():  # started so recently that it had no time to call setsid
            os.kill(pid, signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL the process, what it started and its process group, and reap it."""
        self.kill_group(wait=True)
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
        output_bytes: the most bytes of the workers' stdout and stderr relayed to the run's output per
            :meth:`map` (None: no limit); the rest is dropped, and a warning says how much.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        workers: int,
        timeout: float | None,
        batch_timeout: float | None = None,
        output_bytes: int | None = None,
    ) -> None:
        self.fn = fn
        self.size = max(1, int(workers))
        self.timeout = timeout if timeout and timeout > 0 else None
        self.batch_timeout = batch_timeout if batch_timeout and batch_timeout > 0 else None
        self.output_bytes = output_bytes
        self._context = multiprocessing.get_context("fork")
        self._workers: list[_Worker] = []
        self._relay: OutputRelay | None = None
        self._owner = os.getpid()
        self._batch = 0  # the number of the current map() call: the first half of each request id
        _LIVE_POOLS.add(self)

    def map(
        self, calls: Sequence[Mapping[str, Any]], stop: Callable[[Outcome], bool] | None = None
    ) -> list[Outcome | None]:
        """One :class:`Outcome` per call, in order; see the module docstring for the limits and the chunks.

        ``stop(outcome)`` returning true for an outcome stops the scoring there (the calls in flight are
        killed): the calls not finished then are ``None``. Arguments that do not pickle raise an
        :class:`RLCoreError` naming the sample.
        """
        if self._relay is not None:
            self._relay.new_batch()
        try:
            return self._map(calls, stop)
        finally:
            self._report_cut_output()

    def _report_cut_output(self) -> None:
        """Warn when scorer output was cut during the batch."""
        cut = self._relay.take_cut() if self._relay is not None else 0
        if cut:
            logger.warning(
                "the scorer processes printed %d bytes more than reward_model.scorer_output_bytes=%s in this batch; "
                "they were not shown",
                cut,
                self.output_bytes,
            )

    def _map(self, calls: Sequence[Mapping[str, Any]], stop: Callable[[Outcome], bool] | None) -> list[Outcome | None]:
        """:meth:`map` without the output accounting."""
        outcomes: list[Outcome | None] = [None] * len(calls)
        pending = deque(range(len(calls)))
        self._batch += 1
        deadline = time.monotonic() + self.batch_timeout if self.batch_timeout else None
        while True:
            self._dispatch(pending, calls)
            busy = [w for w in self._workers if w.chunk]
            if not busy:
                return outcomes
            limits = [w.start + self.timeout for w in busy] if self.timeout else []
            if deadline is not None:
                limits.append(deadline)
            wait_s = max(0.0, min(limits) - time.monotonic()) if limits else None
            ready = set(wait([w.conn for w in busy] + [w.sentinel for w in busy], wait_s))
            for worker in busy:
                if self._collect(worker, ready, outcomes, pending, stop, calls):
                    self._abandon()
                    return outcomes
            if deadline is not None and time.monotonic() >= deadline:
                self._abandon()
                return [Outcome("timeout", "batch") if o is None else o for o in outcomes]

    def close(self) -> None:
        """End every worker process and its process group, and stop relaying their output (idempotent)."""
        for worker in self._workers:
            worker.kill()
        self._workers = []
        if self._relay is not None:
            self._relay.close()
            self._relay = None

    def kill_groups(self) -> None:
        """SIGKILL every worker's process group at once, without waiting (the process is ending); a no-op in a
        process forked from the pool's owner."""
        if os.getpid() != self._owner:
            return
        for worker in self._workers:
            worker.kill_group()

    # ----------------------------------------------------------------- internals
    def _dispatch(self, pending: deque[int], calls: Sequence[Mapping[str, Any]]) -> None:
        """Send the workers free now (idle ones, then new ones up to the pool size) one chunk each: the
        pending calls are dealt round-robin over them (at most :data:`MAX_CHUNK` each), so that neighbours,
        which tend to take as long as each other (a prompt's group), run on different workers."""
        if not pending:
            return
        idle = [w for w in self._workers if not w.chunk]
        free = min(len(pending), len(idle) + self.size - len(self._workers))
        dealt = [pending.popleft() for _ in range(min(len(pending), free * MAX_CHUNK))]
        for chunk in (dealt[k::free] for k in range(free)):
            while True:
                worker = idle.pop(0) if idle else self._start()
                try:
                    worker.conn.send([((self._batch, index), dict(calls[index])) for index in chunk])
                    break
                except OSError:  # the worker died between calls: replace it and retry
                    self._retire(worker)
                except (pickle.PicklingError, TypeError, AttributeError) as exc:
                    self._abandon()
                    index = next((i for i in chunk if not _picklable(dict(calls[i]))), chunk[0])
                    raise RLCoreError(f"cannot send sample {index}'s arguments to a scorer process: {exc}") from exc
            worker.chunk.extend(chunk)
            worker.start = time.monotonic()

    def _start(self) -> _Worker:
        """Start a worker and add it to the pool (and the output relay with the first one)."""
        if self._relay is None:
            self._relay = OutputRelay(self.output_bytes)
        worker = _Worker(self._context, self.fn, self._workers, self._relay)
        self._workers.append(worker)
        return worker

    def _collect(
        self,
        worker: _Worker,
        ready: set[Any],
        outcomes: list[Outcome | None],
        pending: deque[int],
        stop: Callable[[Outcome], bool] | None,
        calls: Sequence[Mapping[str, Any]],
    ) -> bool:
        """Record the outcomes a busy worker sent; retire it when it died, its running sample is past the
        timeout or it replied out of turn, sending the rest of its chunk back to the front of ``pending``.
        True when ``stop`` flagged one of the outcomes recorded."""
        dead = worker.sentinel in ready
        overdue = self.timeout is not None and time.monotonic() - worker.start >= self.timeout
        failure: Outcome | None = None
        # read all that arrived (an outcome that arrived just in time beats the timeout)
        readable = worker.conn in ready or ((dead or overdue) and worker.conn.poll())
        while readable and worker.chunk:
            try:
                reply = worker.conn.recv()
            except (EOFError, OSError):
                dead = True
                break
            except Exception as exc:  # noqa: BLE001 - a value that cannot be unpickled here
                reply = (
                    (self._batch, worker.chunk[0]),
                    "error",
                    ScorerProcessError(f"the scorer's result cannot be read: {exc}"),
                )
            if not (isinstance(reply, tuple) and len(reply) == 3 and reply[0] == (self._batch, worker.chunk[0])):
                failure = Outcome("error", self._stray_reply(worker, reply, calls))
                break
            outcome = Outcome(reply[1], reply[2])
            outcomes[worker.chunk.popleft()] = outcome
            worker.start = time.monotonic()
            if stop is not None and stop(outcome):
                return True
            readable = bool(worker.chunk) and worker.conn.poll()
        if failure is not None:
            outcome = failure
        elif dead:
            worker.process.join(1)
            code = worker.process.exitcode
            how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            outcome = Outcome("error", ScorerProcessError(f"the scorer's process died ({how})"))
        elif self.timeout is not None and worker.chunk and time.monotonic() - worker.start >= self.timeout:
            outcome = Outcome("timeout", "sample")
        else:
            return False
        running = bool(worker.chunk)  # a worker that died idle has no sample to blame
        if running:
            outcomes[worker.chunk.popleft()] = outcome
            pending.extendleft(reversed(worker.chunk))
        self._retire(worker)
        return running and stop is not None and stop(outcome)

    def _stray_reply(self, worker: _Worker, reply: Any, calls: Sequence[Mapping[str, Any]]) -> ScorerReplyError:
        """The error for a reply that does not answer the sample ``worker`` is scoring."""
        index = worker.chunk[0]
        request = reply[0] if isinstance(reply, tuple) and reply else None
        if isinstance(request, tuple) and len(request) == 2 and request[0] == self._batch:
            what = f"sample {request[1]} of this batch"
        elif isinstance(request, tuple) and len(request) == 2 and isinstance(request[0], int):
            what = "a sample of an earlier batch"
        else:
            what = f"no request it was sent ({reply!r:.80})"
        return ScorerReplyError(
            f"{scorer_label(calls[index])}: its scorer process (pid {worker.process.pid}) sent a reply for {what} "
            f"while it was scoring sample {index}: something besides the scorer process's own loop wrote to its pipe "
            "(a process the scorer forked and did not end with os._exit()?), so scores would go to the wrong "
            "samples; the run stops instead"
        )

    def _retire(self, worker: _Worker) -> None:
        """Kill a worker and drop it from the pool (a new one is started when needed)."""
        worker.kill()
        worker.chunk.clear()
        if worker in self._workers:
            self._workers.remove(worker)

    def _abandon(self) -> None:
        """Kill the workers that are still scoring."""
        for worker in [w for w in self._workers if w.chunk]:
            self._retire(worker)


#: the pools whose workers may be running: their process groups are killed when the controller exits
_LIVE_POOLS: weakref.WeakSet[ScorerPool] = weakref.WeakSet()


def _kill_live_pools() -> None:
    """Kill the process groups of every live pool's workers (at exit, and by the stop watchdog)."""
    for pool in list(_LIVE_POOLS):
        pool.kill_groups()


atexit.register(_kill_live_pools)
at_hard_exit(_kill_live_pools)
