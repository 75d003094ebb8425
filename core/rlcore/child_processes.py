"""Processes that user code starts in the controller end with the run and never hold its output.

A scorer run inline (``reward_model.scorer_timeout=0``) may start a helper process and leave it running: a
``subprocess.Popen`` it never waits for, a server started with ``start_new_session=True`` (outside the run's
process group), a daemon that double-forks. Such a process would outlive the run, and one that inherited the
run's stdout would keep ``rlcore run ... | tee log`` waiting after the run ended. Here:

- **Which processes are user code's.** :func:`track_processes` lists the controller's descendants (from
  ``/proc/<pid>/task/<tid>/children``) before and after each call of user code. A process that appeared
  during the call is the call's when the chain of parents from it up to the controller holds only processes
  that also appeared during the call: what the run itself started (Ray's processes, torchrun ranks, vLLM's
  engine processes, the scorer processes, registered with :func:`mark_infrastructure`) was there before the
  call, or descends from something that was, and is never touched. The controller is made a *child
  subreaper* (:func:`become_subreaper`, ``prctl(PR_SET_CHILD_SUBREAPER)``), so a daemon that double-forks
  is re-parented to the controller instead of to init and stays in its tree. (A process that the run's
  own code starts from another thread in the very moment of a user call, and orphans, would be taken for
  the call's; rlcore starts no processes while it scores.) When no process was created on the machine
  during a call (``/proc/loadavg``'s last process id is unchanged), nothing is listed.
- **Killed with the run.** :func:`kill_leftovers` — called when ``rlcore run`` ends, however it ends
  (completed, failed, stopped by a signal; at interpreter exit; by the stop watchdog's forced exit) — stops
  (SIGSTOP) the processes user code left running and everything they started since, then kills them
  (SIGKILL) and reaps those that became the controller's children, with one warning naming each. A call
  that leaves a process running is also warned about once per component, when it returns. Only a controller
  killed with SIGKILL leaves them running.
- **Never the run's output.** :func:`isolated_output` makes fd 1 and 2 pipes for the duration of the call;
  a thread copies what arrives to the run's real stdout and stderr. A child started in the call inherits
  the pipes, not the run's output, so whatever it does later (even outliving a controller killed with
  SIGKILL) it cannot keep a reader of the run's output waiting. When the call returns, what it printed has
  been written out before anything else is. A terminal is left as it is: no reader waits for its end, and
  ``breakpoint()`` in an inline scorer (the mode is for debugging) keeps its line editing.

:func:`kill_tree` (stop, then kill a process and all its descendants) is what the scorer processes' pool
uses to end a scorer process together with whatever it started, in or out of its process group.
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import selectors
import signal
import struct
import sys
import termios
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rlcore.graceful_stop import at_hard_exit

logger = logging.getLogger(__name__)

#: ``prctl`` option: orphaned descendants are re-parented to this process instead of to init
PR_SET_CHILD_SUBREAPER = 36
#: how many rounds :func:`kill_tree` and :func:`kill_leftovers` look for processes started while they stop
#: the others
_FREEZE_ROUNDS = 20
#: seconds to wait for killed processes to be reaped (by the controller or by their parents)
_REAP_S = 2.0


@dataclass(frozen=True)
class ProcessInfo:
    """One process as ``/proc/<pid>/stat`` shows it. ``start`` (clock ticks after boot) tells a process from
    a later one that got the same pid."""

    pid: int
    ppid: int
    start: int
    state: str

    @property
    def key(self) -> tuple[int, int]:
        """``(pid, start)``: the process, whatever reuses its pid later."""
        return self.pid, self.start


def process_exists(pid: int) -> bool:
    """Whether a process ``pid`` exists on this node (one of another user's counts too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_process(pid: int) -> ProcessInfo | None:
    """The process ``pid``, or None when there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read().decode(errors="replace")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the command name in parentheses may hold spaces
    return ProcessInfo(pid, int(fields[1]), int(fields[19]), fields[0])


def command_line(pid: int) -> str:
    """``pid``'s command line (at most 120 characters), or its name in brackets."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            words = file.read().rstrip(b"\0").split(b"\0")
        text = " ".join(word.decode(errors="replace") for word in words if word)
        if not text:
            with open(f"/proc/{pid}/comm", "rb") as file:
                text = f"[{file.read().decode(errors='replace').strip()}]"
    except OSError:
        return "?"
    return text if len(text) <= 120 else text[:117] + "..."


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (all its threads' children; from a scan of ``/proc`` where the kernel
    has no ``children`` files)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as file:
                found.extend(int(word) for word in file.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended
            return _scan_children(pid)
        except OSError:
            continue
    return found


def _scan_children(pid: int) -> list[int]:
    """The child processes of ``pid`` from every process's ``stat``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = read_process(int(name))
            if info is not None and info.ppid == pid:
                found.append(info.pid)
    return found


def descendants(pid: int) -> dict[int, ProcessInfo]:
    """Every process below ``pid`` (children, their children, ...), by pid."""
    found: dict[int, ProcessInfo] = {}
    queue = [pid]
    while queue:
        for child in children(queue.pop()):
            info = read_process(child)
            if info is not None and child not in found:
                found[child] = info
                queue.append(child)
    return found


def become_subreaper() -> bool:
    """Linux: make this process the child subreaper of its descendants (orphans are re-parented to it, not
    to init), so that a process that double-forked stays among its descendants. False where not possible."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


# ------------------------------------------------------------------ killing
def _signal(info: ProcessInfo, signum: int) -> bool:
    """Send ``signum`` to the process ``info`` names, unless its pid now belongs to another process."""
    current = read_process(info.pid)
    if current is None or current.start != info.start:
        return False
    try:
        os.kill(info.pid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _freeze_and_kill(roots: Iterable[ProcessInfo]) -> list[ProcessInfo]:
    """SIGSTOP ``roots`` and all their descendants (again and again, until no new one appears, so that none
    can start another meanwhile), then SIGKILL them all; returns those signalled."""
    stopped: dict[tuple[int, int], ProcessInfo] = {}
    pending = list(roots)
    for _ in range(_FREEZE_ROUNDS):
        fresh = [info for info in pending if info.key not in stopped and info.state != "Z"]
        if not fresh:
            break
        for info in fresh:
            if _signal(info, signal.SIGSTOP):
                stopped[info.key] = info
        pending = [child for info in fresh for child in descendants(info.pid).values()]
    for info in stopped.values():
        _signal(info, signal.SIGKILL)
    return list(stopped.values())


def _reap(killed: list[ProcessInfo], keep: int | None = None) -> None:
    """Wait (at most :data:`_REAP_S`) until the ``killed`` processes are gone, reaping those that are (or,
    once their parent died, became) this process's children, but ``keep`` (a pid whose owner reaps it)."""
    me = os.getpid()
    waiting = {info.key: info for info in killed if info.pid != keep}
    deadline = time.monotonic() + _REAP_S
    while waiting and time.monotonic() < deadline:
        for key, info in list(waiting.items()):
            current = read_process(info.pid)
            if current is None or current.start != info.start:
                del waiting[key]
            elif current.ppid == me and current.state == "Z":
                try:
                    os.waitpid(info.pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                del waiting[key]
        if waiting:
            time.sleep(0.01)


def kill_tree(pid: int, *, wait: bool = True) -> None:
    """Kill the process ``pid`` and every process below it (SIGSTOP all, then SIGKILL), also those that left
    its process group or session. With ``wait``, wait until they are gone, reaping those re-parented to this
    process (the caller reaps ``pid`` itself)."""
    root = read_process(pid)
    if root is None:
        return
    killed = _freeze_and_kill([root])
    if wait:
        _reap(killed, keep=pid)


# ------------------------------------------------------------------ what user code leaves running
@dataclass
class _Leftover:
    """A process that a call of user code left running."""

    info: ProcessInfo
    what: str
    command: str


class _Tracker:
    """The controller's descendants as last listed, and the processes that user code left running."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner = os.getpid()
        self.infrastructure: set[int] = set()
        self.leftovers: dict[tuple[int, int], _Leftover] = {}
        self.warned: set[str] = set()
        self.running: list[tuple[dict[int, ProcessInfo], str]] = []  # the calls in progress: (before, what)
        self._listed: tuple[int, dict[int, ProcessInfo]] | None = None  # (last pid on the machine, the list)

    def adopt(self) -> None:
        """In a process forked from the one that made this tracker, start afresh: its descendants are its own."""
        if os.getpid() != self.owner:
            self.owner = os.getpid()
            self.infrastructure = set()
            self.leftovers = {}
            self.warned = set()
            self.running = []
            self._listed = None

    def snapshot(self) -> dict[int, ProcessInfo]:
        """The controller's descendants now (the previous list when no process was created since)."""
        last = _last_pid()
        listed = self._listed
        if last is not None and listed is not None and listed[0] == last:
            return listed[1]
        now = descendants(os.getpid())
        if last is not None:
            self._listed = (last, now)
        return now

    def record(self, before: dict[int, ProcessInfo], after: dict[int, ProcessInfo], what: str) -> list[_Leftover]:
        """Record the processes in ``after`` that the call ``what`` started (see the module docstring)."""
        old = {info.key for info in before.values()}
        me = os.getpid()
        verdict: dict[int, bool] = {}

        def started_by_the_call(pid: int) -> bool:
            if pid in verdict:
                return verdict[pid]
            info = after[pid]
            mine = info.key not in old and pid not in self.infrastructure
            if mine and info.ppid != me:
                mine = info.ppid in after and started_by_the_call(info.ppid)
            verdict[pid] = mine
            return mine

        found = []
        for pid, info in after.items():
            if info.state != "Z" and started_by_the_call(pid) and info.key not in self.leftovers:
                leftover = _Leftover(info, what, command_line(pid))
                self.leftovers[info.key] = leftover
                found.append(leftover)
        return found


_loadavg: dict[int, int] = {}  # process id -> its open /proc/loadavg


def _last_pid() -> int | None:
    """The last process id handed out on this machine (its pid namespace), from ``/proc/loadavg`` (kept open:
    read twice per call of user code)."""
    try:
        fd = _loadavg.get(os.getpid())
        if fd is None:
            fd = _loadavg[os.getpid()] = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
        return int(os.pread(fd, 256, 0).split()[-1])
    except (OSError, ValueError, IndexError):
        return None


_tracker = _Tracker()


def mark_infrastructure(pid: int) -> None:
    """Record ``pid`` as a process of the run's own (a scorer process, a server that rlcore starts on first use
    inside a call of user code): it and what it starts are never taken for user code's, even when it starts
    during a call of user code."""
    with _tracker.lock:
        _tracker.infrastructure.add(pid)
        for key in [key for key in _tracker.leftovers if key[0] == pid]:
            del _tracker.leftovers[key]


@contextmanager
def track_processes(what: str) -> Iterator[None]:
    """Around one call of user code (``what`` names it): record the processes it leaves running, to be
    killed by :func:`kill_leftovers`, and warn the first time ``what`` leaves one."""
    with _tracker.lock:
        _tracker.adopt()
        call = (_tracker.snapshot(), what)
        _tracker.running.append(call)
    try:
        yield
    finally:
        with _tracker.lock:
            found = []
            if os.getpid() == _tracker.owner:
                _tracker.running.remove(call)
                found = _tracker.record(call[0], _tracker.snapshot(), what)
            warn = bool(found) and what not in _tracker.warned
            if warn:
                _tracker.warned.add(what)
        if warn:
            logger.warning(
                "%s left %s running after its call; rlcore kills what user code leaves running when the run ends",
                what,
                ", ".join(f"process {leftover.info.pid} ({leftover.command})" for leftover in found),
            )


def kill_leftovers() -> list[str]:
    """Kill the processes that user code left running (and what they started since), and those that calls
    still running started, warning with each one's pid, command and the component that started it; returns
    those descriptions. Processes that ended on their own are skipped."""
    if os.getpid() != _tracker.owner:
        return []
    with _tracker.lock:
        now = _tracker.snapshot()
        for before, what in _tracker.running:  # a call still running (stuck, when the stop watchdog ends the run)
            _tracker.record(before, now, what)
        leftovers = list(_tracker.leftovers.values())
        _tracker.leftovers.clear()
    alive = []
    for leftover in leftovers:
        current = read_process(leftover.info.pid)
        if current is not None and current.start == leftover.info.start and current.state != "Z":
            alive.append(leftover)
    if not alive:
        return []
    named = [f"process {x.info.pid} ({command_line(x.info.pid)}), started by {x.what}" for x in alive]
    killed = _freeze_and_kill([leftover.info for leftover in alive])
    logger.warning("the run ended: killed %d process(es) that user code left running: %s", len(named), "; ".join(named))
    _reap(killed)
    return named


def _kill_leftovers_quietly() -> None:
    """:func:`kill_leftovers` at interpreter exit and at the stop watchdog's forced exit: never raises."""
    try:
        kill_leftovers()
    except Exception:  # noqa: BLE001 - the process is ending
        pass


# ------------------------------------------------------------------ output
class _OutputPipes:
    """While at least one :func:`isolated_output` block runs, fd 1 and 2 are the write ends of two pipes; a
    thread copies what arrives to the fds they replaced (to fd 1 and 2 themselves once restored)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # the count and the swap of fds
        self.copying = threading.Lock()  # held while a chunk is read and written out
        self.depth = 0
        self.pipes: dict[int, tuple[int, int]] = {}  # fd (1 or 2) -> (read end, write end)
        self.saved: dict[int, int] = {}  # fd -> a duplicate of what it was before the block
        self.thread: threading.Thread | None = None
        self.pid = os.getpid()

    def _start(self) -> None:
        """Make the pipes and the copying thread (once per process)."""
        if self.thread is not None and self.pid == os.getpid():
            return
        self.pid = os.getpid()
        self.pipes = {fd: os.pipe() for fd in (1, 2)}
        for read, _ in self.pipes.values():
            os.set_blocking(read, False)
        self.thread = threading.Thread(target=self._copy, name="rlcore-user-output", daemon=True)
        self.thread.start()

    def enter(self) -> None:
        """Start a block: the first one swaps fd 1 and 2 for the pipes (each that is open and not a terminal)."""
        with self.lock:
            self.depth += 1
            if self.depth > 1:
                return
            self._start()
            _flush_python_streams()
            with self.copying:
                for fd, (_, write) in self.pipes.items():
                    try:
                        if os.isatty(fd):  # nobody waits for a terminal's end; breakpoint() keeps line editing
                            continue
                        self.saved[fd] = os.dup(fd)
                    except OSError:  # the fd is closed: nothing to protect
                        continue
                    os.dup2(write, fd)

    def leave(self) -> None:
        """End a block: the last one waits until what was written has been copied out, then restores the fds."""
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                _flush_python_streams()
                self.restore(wait_s=None)

    def restore(self, wait_s: float | None) -> None:
        """Copy out what is in the pipes (waiting at most ``wait_s`` seconds for the copying thread; None: no
        bound) and put the saved fds back."""
        deadline = None if wait_s is None else time.monotonic() + wait_s
        while True:
            acquired = self.copying.acquire(timeout=-1 if deadline is None else max(0.0, deadline - time.monotonic()))
            try:
                unread = sum(_unread(read) for read, _ in self.pipes.values())
                if not unread or (deadline is not None and time.monotonic() >= deadline):
                    if unread:  # the copying thread is stuck: copy what is there now
                        self._copy_available()
                    for fd, saved in self.saved.items():
                        os.dup2(saved, fd)
                        os.close(saved)
                    self.saved = {}
                    return
            finally:
                if acquired:
                    self.copying.release()
            time.sleep(0.0005)

    def _target(self, fd: int) -> int:
        return self.saved.get(fd, fd)

    def _copy_available(self) -> None:
        """Copy what the pipes hold now (the caller holds :attr:`copying`)."""
        for fd, (read, _) in self.pipes.items():
            while True:
                try:
                    data = os.read(read, 65536)
                except BlockingIOError:
                    break
                if not data:
                    break
                _write_all(self._target(fd), data)

    def _copy(self) -> None:
        """The thread: copy each chunk to its fd's current target, holding :attr:`copying` meanwhile."""
        selector = selectors.DefaultSelector()
        for fd, (read, _) in self.pipes.items():
            selector.register(read, selectors.EVENT_READ, fd)
        while selector.get_map():
            for key, _ in selector.select():
                with self.copying:
                    try:
                        data = os.read(key.fd, 65536)
                    except BlockingIOError:
                        continue
                    if not data:  # every write end closed (never in the process that owns them)
                        selector.unregister(key.fd)
                        continue
                    _write_all(self._target(key.data), data)


def _unread(fd: int) -> int:
    """How many bytes wait in the pipe ``fd``."""
    return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])


def _write_all(fd: int, data: bytes) -> None:
    """Write ``data`` to ``fd``; a closed reader (``| head``) drops it."""
    while data:
        try:
            written = os.write(fd, data)
        except OSError:
            return
        data = data[written:]


def _flush_python_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


_output = _OutputPipes()


@contextmanager
def isolated_output() -> Iterator[None]:
    """Inside the block, fd 1 and 2 are pipes copied to the run's stdout and stderr, so that a process started
    in it never holds the run's own output (see the module docstring). Blocks may nest and overlap (threads)."""
    _output.enter()
    try:
        yield
    finally:
        _output.leave()


def _restore_output_quietly() -> None:
    """At the stop watchdog's forced exit, with a call of user code stuck: the run's own fds back, with what
    the pipes hold, so that the last messages reach the run's output."""
    try:
        if _output.saved and _output.pid == os.getpid():
            _output.restore(wait_s=0.5)
    except Exception:  # noqa: BLE001 - the process is ending
        pass


def _drain_output_quietly() -> None:
    """At interpreter exit: copy out what processes of user code wrote to the pipes last."""
    try:
        if _output.pipes and _output.pid == os.getpid():
            with _output.copying:
                _output._copy_available()
    except Exception:  # noqa: BLE001 - the process is ending
        pass


atexit.register(_drain_output_quietly)  # atexit runs last registered first: the drain after the kill
atexit.register(_kill_leftovers_quietly)
at_hard_exit(_restore_output_quietly)
at_hard_exit(_kill_leftovers_quietly)
