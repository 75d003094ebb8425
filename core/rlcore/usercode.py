"""User code must not end a run: ``SystemExit`` and a ``KeyboardInterrupt`` that no Ctrl-C caused become an
error naming the component and the line.

A reward file, a scorer, a tool, a plugin hook or a custom dataset that calls ``sys.exit()`` (or ``exit()``,
or raises ``KeyboardInterrupt`` itself) would otherwise stop the run quietly, with exit status 0 and nothing
trained. :func:`exit_error` turns such an exception into a :class:`UserCodeExit` that says what was
running and where the exit was raised; :func:`is_stop_signal` tells a real Ctrl-C or SIGTERM (which must
keep stopping the run) from one raised by code.
"""

from __future__ import annotations

import signal
import sys
import sysconfig
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from rlcore.errors import RLCoreError
from rlcore.graceful_stop import SignalInterrupt

#: the exceptions that end a process rather than report a failure
EXIT_EXCEPTIONS: tuple[type[BaseException], ...] = (SystemExit, KeyboardInterrupt)


class UserCodeExit(RLCoreError):
    """User code raised ``SystemExit`` or ``KeyboardInterrupt`` (without a Ctrl-C): the message names the
    component and the file and line."""


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


def raised_at(tb: TracebackType | None) -> str:
    """Where an exception was raised: ``file:line (in function)`` of the innermost frame outside the standard
    library and outside a library's replacement of ``sys.exit`` (so ``exit()``, ``argparse`` and wandb's
    exit hook name the caller), or ``an unknown place`` without a traceback."""
    wrapper = _exit_wrapper_code()
    frames = [(frame.f_code, line) for frame, line in traceback.walk_tb(tb) if frame.f_code is not wrapper]
    for code, line in reversed(frames):
        if not _in_stdlib(code.co_filename):
            return f"{code.co_filename}:{line} (in {code.co_name})"
    if frames:
        code, line = frames[-1]
        return f"{code.co_filename}:{line} (in {code.co_name})"
    return "an unknown place"


def describe_exit(exc: BaseException) -> str:
    """``SystemExit(3) raised at reward.py:7 (in compute_score)`` for an exit exception."""
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


@contextmanager
def contain_exit(what: str) -> Iterator[None]:
    """Inside the block, ``SystemExit`` and a ``KeyboardInterrupt`` that no signal caused become a
    :class:`UserCodeExit` naming ``what`` (for example ``"a plugin's on_config_resolved hook"``)."""
    try:
        yield
    except EXIT_EXCEPTIONS as exc:
        if is_stop_signal(exc):
            raise
        raise exit_error(exc, what) from None
