"""User code must not end a run: ``SystemExit``, a ``KeyboardInterrupt`` that no Ctrl-C caused and
``os._exit()`` become an error naming the component and the line.

A reward file, a scorer, a tool, a plugin hook or a custom dataset that calls ``sys.exit()`` (or ``exit()``,
or raises ``KeyboardInterrupt`` itself) would otherwise stop the run quietly, with exit status 0 and nothing
trained. :func:`exit_error` turns such an exception into a :class:`UserCodeExit` that says what was
running and where the exit was raised; :func:`is_stop_signal` tells a real Ctrl-C or SIGTERM (which must
keep stopping the run) from one raised by code.

``os._exit()`` ends the process without raising anything, so this module replaces it (``os._exit`` and
``posix._exit``, once, at import) with a function that ends the process as before, except inside
:func:`contain_exit` (and so :func:`user_call`): there, called by any thread of the process that entered the
block, it raises :class:`ProcessExit` instead, and the block ends with the :class:`UserCodeExit` even when
user code caught that exception. A process forked by user code (another process id) and every call outside
such a block end the process as ``os._exit`` always did; rlcore's own forced exits (the stop watchdog) call
:data:`real_os_exit`. ``ctypes`` calls of the C library's ``_exit`` are not seen.

:func:`user_call` is what the controller wraps each inline call of user code in (the reward scorers run
with ``reward_model.scorer_timeout=0``): the exits above, the run's SIGINT/SIGTERM handlers kept
(:func:`rlcore.graceful_stop.keep_stop_handlers`), the processes the call leaves running tracked and
its output kept from them (:mod:`rlcore.child_processes`), and a process forked by the call that returns into
rlcore ended on the spot.
"""

from __future__ import annotations

import os
import posix
import signal
import sys
import sysconfig
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, NoReturn

from rlcore.child_processes import isolated_output, track_processes
from rlcore.errors import RLCoreError
from rlcore.graceful_stop import SignalInterrupt, keep_stop_handlers

#: the exceptions that end a process rather than report a failure
EXIT_EXCEPTIONS: tuple[type[BaseException], ...] = (SystemExit, KeyboardInterrupt)


class UserCodeExit(RLCoreError):
    """User code raised ``SystemExit`` or ``KeyboardInterrupt`` (without a Ctrl-C), or called ``os._exit``:
    the message names the component and the file and line."""


class ProcessExit(SystemExit):
    """Raised in place of ending the process when user code calls ``os._exit(status)`` inside
    :func:`contain_exit`; :attr:`where` is the caller's ``file:line (in function)``."""

    def __init__(self, status: int, where: str) -> None:
        super().__init__(status)
        self.where = where


def _library_roots() -> tuple[str, ...]:
    """The folders of Python's standard library (without its site-packages)."""
    paths = sysconfig.get_paths()
    return tuple(str(Path(paths[key]).resolve()) for key in ("stdlib", "platstdlib") if key in paths)


_STDLIB = _library_roots()


def _in_stdlib(filename: str) -> bool:
    """Whether ``filename`` is a module of the standard library (``exit()``'s ``_sitebuiltins``, argparse ...),
    frozen ones (``<frozen _sitebuiltins>``) included."""
    if filename.startswith("<frozen "):
        return True
    if "site-packages" in filename or "dist-packages" in filename:
        return False
    try:
        resolved = str(Path(filename).resolve())
    except OSError:
        return False
    return resolved.startswith(_STDLIB)


def _exit_wrapper_code() -> Any:
    """The code of ``sys.exit`` when a library replaced the builtin with a Python function (wandb does, to run
    its exit hooks): its frame raises the ``SystemExit``, but the user's line is the one that called it."""
    return getattr(sys.exit, "__code__", None)


def _innermost_user_frame(frames: list[tuple[Any, int]]) -> str:
    """``file:line (in function)`` of the innermost of ``frames`` (``(code, line)``, outermost first) outside
    the standard library, else of the innermost one; ``an unknown place`` without frames."""
    for code, line in reversed(frames):
        if not _in_stdlib(code.co_filename):
            return f"{code.co_filename}:{line} (in {code.co_name})"
    if frames:
        code, line = frames[-1]
        return f"{code.co_filename}:{line} (in {code.co_name})"
    return "an unknown place"


def raised_at(tb: TracebackType | None) -> str:
    """Where an exception was raised: ``file:line (in function)`` of the innermost frame outside the standard
    library and outside a library's replacement of ``sys.exit`` (so ``exit()``, ``argparse`` and wandb's
    exit hook name the caller), or ``an unknown place`` without a traceback."""
    wrapper = _exit_wrapper_code()
    return _innermost_user_frame(
        [(frame.f_code, line) for frame, line in traceback.walk_tb(tb) if frame.f_code is not wrapper]
    )


def _called_at(frame: FrameType | None) -> str:
    """Where the call that made ``frame`` the caller's frame happened (see :func:`raised_at`)."""
    return _innermost_user_frame(list(reversed([(f.f_code, line) for f, line in traceback.walk_stack(frame)])))


def describe_exit(exc: BaseException) -> str:
    """``SystemExit(3) raised at reward.py:7 (in compute_score)`` for an exit exception
    (``os._exit(0) called at ...`` for :class:`ProcessExit`)."""
    if isinstance(exc, ProcessExit):
        return f"os._exit({exc.code!r}) called at {exc.where}"
    if isinstance(exc, SystemExit):
        what = f"SystemExit({exc.code!r})"
    else:
        what = f"{type(exc).__name__} (no Ctrl-C was pressed)"
    return f"{what} raised at {raised_at(exc.__traceback__)}"


def exit_error(exc: BaseException, what: str) -> UserCodeExit:
    """The :class:`UserCodeExit` for ``exc`` raised by ``what`` (for example ``"the reward scorer
    (data_source 'gsm8k', sample 3)"``)."""
    return UserCodeExit(
        f"{what} tried to end the run: {describe_exit(exc)}; user code must return or raise an exception "
        "instead of ending the process"
    )


def is_stop_signal(exc: BaseException) -> bool:
    """Whether ``exc`` comes from a real SIGINT/SIGTERM rather than from code: the run's stop handler raises
    :class:`~rlcore.graceful_stop.SignalInterrupt`; outside a run, a ``KeyboardInterrupt`` under Python's
    default SIGINT handler may be a real Ctrl-C, so it counts as one."""
    if isinstance(exc, SignalInterrupt):
        return True
    return isinstance(exc, KeyboardInterrupt) and signal.getsignal(signal.SIGINT) is signal.default_int_handler


# ------------------------------------------------------------------ os._exit
class _ExitBlock:
    """One :func:`contain_exit` block: the process that entered it and the first ``os._exit`` called in it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.called: ProcessExit | None = None


#: the blocks entered and not left; list appends and removals are atomic, and no lock is taken, so that a
#: process forked while another thread changed the list can still call ``os._exit`` (multiprocessing's do)
_blocks: list[_ExitBlock] = []

#: ``os._exit`` as Python has it: ends the process at once, whatever runs
real_os_exit: Callable[[int], NoReturn] = getattr(os._exit, "__wrapped__", os._exit)


def _guarded_os_exit(status: int) -> NoReturn:
    """``os._exit`` while this module is loaded: inside a :func:`contain_exit` block entered by this process,
    raise :class:`ProcessExit` (and record it on the block); elsewhere end the process."""
    pid = os.getpid()
    blocks = [block for block in tuple(_blocks) if block.pid == pid]
    if not blocks:
        real_os_exit(status)
    exc = ProcessExit(status, _called_at(sys._getframe(1)))
    for block in blocks:
        block.called = block.called or exc
    raise exc


_guarded_os_exit.__wrapped__ = real_os_exit  # type: ignore[attr-defined]
os._exit = _guarded_os_exit
posix._exit = _guarded_os_exit


@contextmanager
def contain_exit(what: str) -> Iterator[None]:
    """Inside the block, ``SystemExit``, a ``KeyboardInterrupt`` that no signal caused and a call of
    ``os._exit`` (by any thread of this process, even when the exception it raises is caught) become a
    :class:`UserCodeExit` naming ``what`` (for example ``"a plugin's on_config_resolved hook"``). An
    :class:`RLCoreError` raised in the block passes as it is (rlcore's own code in the block already turned the
    exit into an error that names it)."""
    block = _ExitBlock()
    _blocks.append(block)
    try:
        yield
    except EXIT_EXCEPTIONS as exc:
        if is_stop_signal(exc):
            raise
        raise exit_error(block.called or exc, what) from None
    except BaseException as exc:
        if block.called is not None and not isinstance(exc, RLCoreError):  # user code caught ProcessExit
            raise exit_error(block.called, what) from exc
        raise
    finally:
        _blocks.remove(block)
    if block.called is not None:  # caught by user code, or called by another thread
        raise exit_error(block.called, what)


def _end_forked_child(what: str) -> NoReturn:
    """End a process that user code forked and that returned into rlcore (it would go on running a copy of
    the run): say so on fd 2 (not through ``sys.stderr``, whose buffer may hold the parent's text) and exit."""
    try:
        os.write(
            2,
            f"rlcore: process {os.getpid()}, forked by {what}, returned into rlcore and was ended there; a forked "
            "child must end with os._exit()\n".encode(errors="replace"),
        )
    finally:
        real_os_exit(0)


@contextmanager
def user_call(what: str) -> Iterator[None]:
    """Run one call of user code in the controller (``what`` names it in messages, e.g. ``"the reward scorer
    (data_source 'gsm8k')"``): exits are contained (:func:`contain_exit`), the run's stop handlers stay
    (:func:`~rlcore.graceful_stop.keep_stop_handlers`), the processes it leaves running are
    recorded to be killed with the run (:func:`~rlcore.child_processes.track_processes`) and none of them
    holds the run's stdout or stderr (:func:`~rlcore.child_processes.isolated_output`); a process it forks that
    returns here is ended."""
    pid = os.getpid()
    with contain_exit(what), keep_stop_handlers(what), track_processes(what), isolated_output():
        try:
            yield
        finally:
            if os.getpid() != pid:
                _end_forked_child(what)
