"""Graceful stop on SIGINT/SIGTERM: the first signal lets the current step finish, a second abandons it."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

import click

#: the signals a run stops on
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """While active (``with StopRequest() as stop:``), SIGINT and SIGTERM set :attr:`signum` instead of killing
    the run; the training loop checks :attr:`requested` between steps. A second signal raises
    :class:`KeyboardInterrupt` at once (the current step is abandoned; metrics and checkpoints already
    written stay). Outside the main thread (where handlers cannot be installed) it does nothing.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        """Whether a stop signal arrived."""
        return self.signum is not None

    @property
    def name(self) -> str:
        """The signal's name (``SIGTERM``), or an empty string."""
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            click.echo(f"\n{signal.Signals(signum).name} again: abandoning the current step", err=True)
            raise KeyboardInterrupt
        self.signum = signum
        click.echo(
            f"\n{signal.Signals(signum).name} received: finishing the current step, then stopping "
            "(send it again to abandon the step)",
            err=True,
        )

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
