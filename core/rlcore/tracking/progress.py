"""The training progress bar: steps done, elapsed time, ETA and the latest values of a few metrics.

While a :class:`ProgressBar` is live its rich ``Console`` is the *active console*
(:func:`active_console`); :class:`~rlcore.tracking.sinks.ConsoleTracker` prints through it so that its
lines appear above the bar instead of tearing it. When stdout is not a terminal (a log file, CI) rich
draws nothing interactive and prints the bar's final state once when the bar stops.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rlcore.tracking.values import format_value

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

#: the metrics shown by default; ``*`` patterns (fnmatch) select every matching key
DEFAULT_KEYS: tuple[str, ...] = (
    "critic/score/mean",
    "response_length/mean",
    "actor/pg_loss",
    "val-core/*/reward/mean@*",
)

_ACTIVE: list[Console] = []


def active_console() -> Console | None:
    """The console of the innermost live progress bar, or ``None`` when no bar is live."""
    return _ACTIVE[-1] if _ACTIVE else None


def short_label(key: str) -> str:
    """A short label for a metric: ``score/mean``, ``actor/pg_loss``, ``val:gsm8k/mean@1``."""
    parts = key.split("/")
    if parts[0].startswith("val-") and len(parts) >= 4:
        return f"val:{parts[-3]}/{parts[-1]}"
    return "/".join(parts[-2:])


class ProgressBar:
    """A rich progress bar over training steps, showing the latest values of ``keys`` in its description.

    Use it as a context manager and call :meth:`update` after each step::

        with ProgressBar(total_steps, enabled=cfg.trainer.progress_bar) as bar:
            for step in ...:
                bar.update(step, metrics)

    With ``enabled=False`` every method does nothing and :attr:`console` is ``None``. ``console`` may be
    given (tests pass one writing to a buffer); by default a new one writes to stdout. ``initial_step``
    is the number of steps already done (a resumed run).
    """

    def __init__(
        self,
        total_steps: int,
        enabled: bool = True,
        keys: Iterable[str] = DEFAULT_KEYS,
        *,
        console: Console | None = None,
        initial_step: int = 0,
    ) -> None:
        """Configure the bar; nothing is drawn before the ``with`` block starts."""
        self.total_steps = int(total_steps)
        self.enabled = bool(enabled)
        self.keys = tuple(keys)
        self.step = int(initial_step)
        self.latest: dict[str, Any] = {}
        self._console = console
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    @property
    def console(self) -> Console | None:
        """The rich console the bar draws on (``None`` when disabled or not started)."""
        return self._console if self._progress is not None else None

    def description(self) -> str:
        """The bar's description: ``step`` and ``label:value`` of the latest tracked metrics."""
        parts = ["step"]
        for pattern in self.keys:
            for key in sorted(k for k in self.latest if fnmatch.fnmatchcase(k, pattern)):
                parts.append(f"{short_label(key)}:{format_value(self.latest[key])}")
        return " ".join(dict.fromkeys(parts))

    def _track(self, metrics: Mapping[str, Any]) -> None:
        for pattern in self.keys:
            for key in sorted(k for k in metrics if fnmatch.fnmatchcase(k, pattern)):
                self.latest[key] = metrics[key]

    def start(self) -> None:
        """Start drawing (``__enter__`` calls this)."""
        if not self.enabled or self._progress is not None:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        if self._console is None:
            self._console = Console()
        self._progress = Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self._console,
        )
        self._task = self._progress.add_task(self.description(), total=self.total_steps, completed=self.step)
        self._progress.start()
        _ACTIVE.append(self._console)

    def update(self, step: int, metrics: Mapping[str, Any] | None = None) -> None:
        """Set the number of completed steps to ``step`` and remember the tracked metrics' latest values."""
        self.step = int(step)
        if metrics:
            self._track(metrics)
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self.step, description=self.description())

    def stop(self) -> None:
        """Stop drawing, leaving the final state on screen (``__exit__`` calls this)."""
        if self._progress is None:
            return
        if self._console in _ACTIVE:
            _ACTIVE.remove(self._console)
        self._progress.stop()
        self._progress = None
        self._task = None

    def __enter__(self) -> ProgressBar:
        """Start the bar and return it."""
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Stop the bar, whether the block succeeded or not."""
        self.stop()
