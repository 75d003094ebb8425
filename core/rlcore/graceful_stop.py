"""Graceful stop on SIGINT/SIGTERM, bounded in time.

The first signal lets the current step finish; a second one, or the end of the grace period
(``trainer.stop_grace_s``), abandons it. A watchdog thread makes that bound hold even when the main thread
is stuck in user code that never returns to Python (a blocking C call): it learns of each signal through
``signal.set_wakeup_fd`` (the C-level handler writes there whatever the main thread is doing), interrupts the
main thread when the grace period is over, and if the main thread still has not ended the run
:data:`UNWIND_S` seconds later, it writes the run's summary itself (:attr:`StopRequest.on_overdue`), runs
the :func:`at_hard_exit` clean-ups (scorer processes, the processes user code left running) and ends the
process with ``128 + signal``.

User code run in the controller must not take the stop handling away (``signal.signal(SIGTERM, SIG_IGN)`` in a
reward function would make the run ignore SIGTERM and train to the end). Inside :func:`keep_stop_handlers`
(each inline call of user code runs in one), ``signal.signal`` called on the main thread for SIGINT or SIGTERM
leaves the run's handler in place (a signal that came while ignored would be lost: the kernel discards it);
after the block, whatever was changed by other means (``_signal.signal``, the wake-up fd, the signal mask)
is put back; both are warned about once per component.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import click

#: the signals a run stops on
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)
#: seconds the main thread gets to end the run (summary, clean-up) once the step is abandoned, before the
#: watchdog ends the process itself
UNWIND_S = 5.0
#: how often the watchdog looks at the signals the main thread's handler counted (when no wake-up byte came)
_POLL_S = 0.25

_hard_exit_cleanups: list[Callable[[], None]] = []
#: the stop request whose handlers are installed now (one run at a time)
_installed: StopRequest | None = None


class SignalInterrupt(KeyboardInterrupt):
    """Raised in the main thread by the stop handler when the step in progress is abandoned (a second
    signal, or the grace period ran out). Code that contains user code's ``KeyboardInterrupt`` lets this one
    through."""


def at_hard_exit(cleanup: Callable[[], None]) -> None:
    """Register ``cleanup`` to run when the watchdog ends a stuck run with ``os._exit`` (finally blocks and
    ``atexit`` handlers do not run then); each clean-up must be quick and must not raise."""
    if cleanup not in _hard_exit_cleanups:
        _hard_exit_cleanups.append(cleanup)


def _hard_exit(status: int) -> None:
    """End the process at once: Python's own ``os._exit`` (:mod:`rlcore.usercode` replaces ``os._exit`` with
    one that user code cannot end the run with, while it runs)."""
    getattr(os._exit, "__wrapped__", os._exit)(status)


def _handler_name(handler: Any) -> str:
    """``SIG_IGN``, ``SIG_DFL``, ``None`` (set from C) or a function's qualified name."""
    if isinstance(handler, signal.Handlers):
        return handler.name
    return getattr(handler, "__qualname__", None) or repr(handler)


#: ``signal.signal`` as Python has it (rlcore's own handlers are installed with it)
real_signal = getattr(signal.signal, "__wrapped__", signal.signal)
_kept = 0  # how many keep_stop_handlers blocks the main thread is in


def _guarded_signal(signalnum: Any, handler: Any) -> Any:
    """``signal.signal`` while this module is loaded: inside :func:`keep_stop_handlers`, on the main thread of
    the process whose run is stopped by :class:`StopRequest`, a SIGINT/SIGTERM handler is not installed (the
    attempt is recorded for the warning) and the run's handler is returned; anything else is installed."""
    stop = _installed
    if (
        _kept
        and stop is not None
        and stop.pid == os.getpid()
        and signalnum in STOP_SIGNALS
        and threading.current_thread() is threading.main_thread()
    ):
        stop.refused.append(f"{signal.Signals(signalnum).name} handler set to {_handler_name(handler)} (refused)")
        return stop._handler
    return real_signal(signalnum, handler)


_guarded_signal.__wrapped__ = real_signal  # type: ignore[attr-defined]
signal.signal = _guarded_signal


@contextmanager
def keep_stop_handlers(what: str) -> Iterator[None]:
    """Around a call of user code (``what`` names it): on the main thread, while a :class:`StopRequest` is
    installed, SIGINT/SIGTERM handlers that the call sets with ``signal.signal`` are not installed, and after the
    call the run's handlers, the wake-up fd its watchdog listens to and the unblocked state of those signals
    are put back where the call changed them by other means; either is warned about once per ``what``.
    Elsewhere it does nothing (user code cannot set handlers off the main thread)."""
    global _kept
    stop = _installed
    if stop is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    _kept += 1
    try:
        yield
    finally:
        _kept -= 1
        changed = stop.refused + stop.reassert()
        stop.refused = []
        if changed and what not in stop.warned:
            stop.warned.add(what)
            click.echo(
                f"warning: {what} tried to change the run's stop handling ({'; '.join(changed)}); rlcore kept the "
                "run's SIGINT/SIGTERM handling, so a stop signal still stops the run. User code must not install "
                "handlers for these signals in the controller",
                err=True,
            )


def reclaim_stop_handlers() -> None:
    """Put the installed :class:`StopRequest`'s SIGINT/SIGTERM handling back after rlcore itself called a library
    that installs its own (``ray.init`` sets a SIGTERM handler that exits the driver at once, so a stop signal
    would no longer finish the step and save): no warning, since no user code did it. Does nothing without an
    installed request or off the main thread."""
    stop = _installed
    if stop is not None and threading.current_thread() is threading.main_thread():
        stop.reassert()


def _where(thread_id: int | None) -> str:
    """``file:line (in function)`` where the thread ``thread_id`` is now, or an empty string."""
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    if frame is None:
        return ""
    return f" (it is at {frame.f_code.co_filename}:{frame.f_lineno}, in {frame.f_code.co_name})"


class StopRequest:
    """While active (``with StopRequest() as stop:``), SIGINT and SIGTERM set :attr:`signum` instead of killing
    the run; the training loop checks :attr:`requested` between steps. A second signal, or ``grace_s`` seconds
    without the run ending, raises :class:`SignalInterrupt` in the main thread (the current step is abandoned;
    metrics and checkpoints already written stay); when even that does not end the run within
    :data:`UNWIND_S` seconds, the watchdog calls :attr:`on_overdue` and ends the process with exit status
    ``128 + signal``. Outside the main thread (where handlers cannot be installed) it does nothing.

    Args:
        grace_s: seconds the step in progress may take after the first signal (None or <= 0: no bound; a
            second signal still abandons it).
    """

    def __init__(self, grace_s: float | None = None) -> None:
        self.signum: int | None = None
        self.grace_s = float(grace_s) if grace_s and grace_s > 0 else None
        #: called by the watchdog, from its own thread, before it ends a run whose main thread is stuck
        self.on_overdue: Callable[[], None] | None = None
        self.installed = False  # whether the handlers were installed (this run's signals are ours to tell)
        self._previous: dict[int, Any] = {}
        self._handler = self._handle  # the one bound method installed, so that it can be recognised
        self._blocked: set[int] = set()  # the stop signals the main thread blocked when the handlers were installed
        self.warned: set[str] = set()  # the user code already warned about for changing the handlers
        self.refused: list[str] = []  # the handlers user code tried to install in the current call
        self.pid = os.getpid()
        self._handled = 0  # signals the Python-level handler saw
        self._raised = False
        self._ended = threading.Event()
        self._lock = threading.Lock()  # the watchdog interrupts the main thread only while the handlers are ours
        self._wakeup: tuple[int, int] | None = None
        self._previous_wakeup = -1
        self._watchdog: threading.Thread | None = None

    @property
    def requested(self) -> bool:
        """Whether a stop signal arrived."""
        return self.signum is not None

    @property
    def name(self) -> str:
        """The signal's name (``SIGTERM``), or an empty string."""
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def caused(self, exc: BaseException) -> bool:
        """Whether ``exc`` (a ``KeyboardInterrupt`` that ended :meth:`fit`) comes from a stop signal rather
        than from user code: the handler raises :class:`SignalInterrupt`; without handlers (not the main
        thread) a ``KeyboardInterrupt`` is taken for a Ctrl-C."""
        return isinstance(exc, SignalInterrupt) or (isinstance(exc, KeyboardInterrupt) and not self.installed)

    def _grace_text(self) -> str:
        return f"at most trainer.stop_grace_s={self.grace_s:g} s" if self.grace_s else "no time limit"

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._handled += 1
        if self._raised:
            return
        if self.signum is not None:
            self._raised = True
            click.echo(f"\n{signal.Signals(signum).name}: abandoning the current step", err=True)
            raise SignalInterrupt
        self.signum = signum
        click.echo(
            f"\n{signal.Signals(signum).name} received: finishing the current step ({self._grace_text()}), then "
            "stopping (send it again to abandon the step)",
            err=True,
        )

    def __enter__(self) -> StopRequest:
        global _installed
        if threading.current_thread() is threading.main_thread():
            self.pid = os.getpid()
            for sig in STOP_SIGNALS:
                self._previous[sig] = real_signal(sig, self._handler)
            self._blocked = set(signal.pthread_sigmask(signal.SIG_BLOCK, [])) & set(STOP_SIGNALS)
            self.installed = True
            self._start_watchdog()
            _installed = self
        return self

    def reassert(self) -> list[str]:
        """Put back this request's handlers, wake-up fd and signal mask where user code changed them (main
        thread, while installed); returns what was changed, in words."""
        changed: list[str] = []
        with self._lock:
            if not self.installed or self._ended.is_set():
                return changed
            for sig in STOP_SIGNALS:
                handler = signal.getsignal(sig)
                if handler is not self._handler:
                    real_signal(sig, self._handler)
                    changed.append(f"{sig.name} handler replaced by {_handler_name(handler)}")
            if self._wakeup is not None:
                previous = signal.set_wakeup_fd(self._wakeup[1], warn_on_full_buffer=False)
                if previous != self._wakeup[1]:
                    changed.append(f"signal wake-up fd set to {previous}")
            blocked = (set(signal.pthread_sigmask(signal.SIG_BLOCK, [])) & set(STOP_SIGNALS)) - self._blocked
            if blocked:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
                changed.append(f"{', '.join(sorted(signal.Signals(s).name for s in blocked))} blocked")
        return changed

    def __exit__(self, *exc: object) -> None:
        global _installed
        if _installed is self:
            _installed = None
        with self._lock:
            self._ended.set()
            for sig, handler in self._previous.items():
                real_signal(sig, handler)
            self._previous = {}
            if self._wakeup is not None:
                signal.set_wakeup_fd(self._previous_wakeup)
                os.write(self._wakeup[1], b"\0")  # wake the watchdog: it closes the pipe and ends

    # ------------------------------------------------------------------ watchdog
    def _start_watchdog(self) -> None:
        """Route the C-level handler's wake-up bytes to a pipe the watchdog thread reads."""
        read, write = os.pipe()
        os.set_blocking(write, False)
        try:
            self._previous_wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except ValueError:  # not the main thread of the main interpreter
            os.close(read)
            os.close(write)
            return
        self._wakeup = (read, write)
        self._watchdog = threading.Thread(
            target=self._watch, args=(read, threading.main_thread().ident), name="rlcore-stop", daemon=True
        )
        self._watchdog.start()

    def _watch(self, read: int, main_id: int | None) -> None:
        """The watchdog's loop: count the stop signals, start the grace period at the first, abandon the step
        at the second or when the period is over. The main thread closes the pipe in :meth:`__exit__`."""
        seen = 0
        signum = 0
        deadline: float | None = None
        wakeups = select.poll()  # not select.select, which refuses a descriptor numbered 1024 or more
        wakeups.register(read, select.POLLIN)
        while not self._ended.is_set():
            wait = _POLL_S if deadline is None else max(0.0, min(_POLL_S, deadline - time.monotonic()))
            if wakeups.poll(wait * 1000):
                data = os.read(read, 512)
                self._forward(data)
                stops = [b for b in data if b in STOP_SIGNALS]
                if stops:
                    seen += len(stops)
                    signum = stops[-1]
            if self._ended.is_set():
                return
            if self._handled > seen:  # the handler ran, but the wake-up byte went elsewhere
                seen, signum = self._handled, self.signum or signum
            if seen and deadline is None and self.grace_s:
                deadline = time.monotonic() + self.grace_s
            if seen >= 2:
                self._abandon(signum, main_id, f"{signal.Signals(signum).name} again")
                return
            if deadline is not None and time.monotonic() >= deadline:
                name = signal.Signals(signum).name
                why = f"the step in progress did not end within trainer.stop_grace_s={self.grace_s:g} s after {name}"
                self._abandon(signum, main_id, why)
                return

    def _forward(self, data: bytes) -> None:
        """Pass wake-up bytes on to the wake-up fd that was set before ours (an event loop's), if any."""
        if self._previous_wakeup >= 0:
            try:
                os.write(self._previous_wakeup, data)
            except OSError:
                pass

    def _abandon(self, signum: int, main_id: int | None, why: str) -> None:
        """Interrupt the main thread (it raises :class:`SignalInterrupt` and ends the run); if the run has not
        ended :data:`UNWIND_S` seconds later, end the process."""
        with self._lock:
            if self._ended.is_set():
                return
            self.signum = self.signum or signum
            if not self._raised:
                click.echo(f"\n{why}: abandoning it", err=True)
                if main_id is not None:
                    signal.pthread_kill(main_id, signum)  # interrupts a blocking system call, runs the handler
        if self._ended.wait(UNWIND_S):
            return
        click.echo(
            f"the run did not stop within {UNWIND_S:g} s of abandoning the step{_where(main_id)}: writing the summary "
            f"and exiting with status {128 + signum}",
            err=True,
        )
        try:
            if self.on_overdue is not None:
                self.on_overdue()
        finally:
            for cleanup in _hard_exit_cleanups:
                try:
                    cleanup()
                except Exception:  # noqa: BLE001 - the process ends anyway
                    pass
            sys.stdout.flush()
            sys.stderr.flush()
            _hard_exit(128 + signum)
