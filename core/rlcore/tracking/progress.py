"""Training progress that reads well in a terminal and in a log file.

In a terminal a :class:`ProgressBar` draws one live line: the bar, ``N/M``, the elapsed time and the ETA
first, then the latest values of a few metrics, cut to the terminal's width (so the bar, the count and the
ETA are always visible). While it is live its rich ``Console`` is the *active console*
(:func:`active_console`); :class:`~rlcore.tracking.sinks.ConsoleTracker` prints through it so that its
lines appear above the bar instead of tearing it.

When the output is not a terminal (a log file, a pipe, CI) it prints one short line per step instead::

    step 5/40, reward 0.430, val 0.300, elapsed 12s, ETA 1m36s

Long phases (validation, checkpoint saves) say what they are doing in both modes (:meth:`ProgressBar.phase`):
a line in a log, the text in front of the metrics in a terminal.
"""

from __future__ import annotations

import fnmatch
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rlcore.tracking.values import format_value

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

#: the metrics shown after the bar in a terminal, in this order (what fits the width is shown); ``*``
#: patterns (fnmatch) select every matching key
DEFAULT_KEYS: tuple[str, ...] = (
    "critic/score/mean",
    "val-core/*/reward/mean@*",
    "response_length/mean",
    "actor/pg_loss",
)
#: the metrics of a log line, ``(label, pattern)``: a pattern matching several keys labels each by its key
DEFAULT_LINE_KEYS: tuple[tuple[str, str], ...] = (
    ("reward", "critic/score/mean"),
    ("val", "val-core/*/reward/mean@*"),
)

#: the ETA of a log line extrapolates the pace of the last this many steps
ETA_WINDOW = 10

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


def format_duration(seconds: float) -> str:
    """``42s``, ``3m05s`` or ``1h02m``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def bar_width(console_width: int) -> int:
    """The bar's width for a terminal ``console_width`` columns wide: a quarter of it, 10 to 40 columns."""
    return max(10, min(40, console_width // 4))


class ProgressBar:
    """Progress over training steps: a live bar in a terminal, one line per step otherwise.

    Use it as a context manager and call :meth:`update` after each step::

        with ProgressBar(total_steps, enabled=cfg.trainer.progress_bar) as bar:
            for step in ...:
                with bar.phase(f"validating after step {step}"):
                    ...
                bar.update(step, metrics)

    ``keys`` are the metrics shown after the bar, ``line_keys`` those of a log line (``(label, pattern)``).
    With ``enabled=False`` every method does nothing and :attr:`console` is ``None``. ``console`` may be
    given (tests pass one writing to a buffer); by default a new one writes to stdout, and whether it is a
    terminal picks the mode. ``initial_step`` is the number of steps already done (a resumed run).
    """

    def __init__(
        self,
        total_steps: int,
        enabled: bool = True,
        keys: Iterable[str] = DEFAULT_KEYS,
        *,
        line_keys: Iterable[tuple[str, str]] = DEFAULT_LINE_KEYS,
        console: Console | None = None,
        initial_step: int = 0,
    ) -> None:
        """Configure the bar; nothing is drawn before the ``with`` block starts."""
        self.total_steps = int(total_steps)
        self.enabled = bool(enabled)
        self.keys = tuple(keys)
        self.line_keys = tuple(line_keys)
        self.step = int(initial_step)
        self.latest: dict[str, Any] = {}
        self._console = console
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._plain = False
        self._started_at = 0.0
        self._marks: deque[tuple[float, int]] = deque(maxlen=ETA_WINDOW + 1)  # (time, step) of recent updates
        self._phase = ""

    @property
    def console(self) -> Console | None:
        """The rich console the live bar draws on (``None`` when disabled, not started or not a terminal)."""
        return self._console if self._progress is not None else None

    def description(self) -> str:
        """The text after the bar: the current phase (if any) and ``label:value`` of the tracked metrics."""
        parts = [self._phase] if self._phase else []
        for pattern in self.keys:
            for key in sorted(k for k in self.latest if fnmatch.fnmatchcase(k, pattern)):
                parts.append(f"{short_label(key)}:{format_value(self.latest[key])}")
        return " ".join(dict.fromkeys(parts))

    def line(self) -> str:
        """The log line of the current step: ``step N/M, reward R, val V, elapsed T, ETA T``."""
        parts = [f"step {self.step}/{self.total_steps}"]
        for label, pattern in self.line_keys:
            matched = sorted(k for k in self.latest if fnmatch.fnmatchcase(k, pattern))
            for key in matched:
                name = label if len(matched) == 1 else short_label(key)
                parts.append(f"{name} {format_value(self.latest[key])}")
        now = time.perf_counter()
        parts.append(f"elapsed {format_duration(now - self._started_at)}")
        if len(self._marks) > 1 and self.step < self.total_steps:
            (then, before), (_, latest) = self._marks[0], self._marks[-1]
            pace = (now - then) / (latest - before)  # seconds per step, over the last ETA_WINDOW steps
            parts.append(f"ETA {format_duration(pace * (self.total_steps - self.step))}")
        return ", ".join(parts)

    def _track(self, metrics: Mapping[str, Any]) -> None:
        patterns = [*self.keys, *(pattern for _, pattern in self.line_keys)]
        for key in metrics:
            if any(fnmatch.fnmatchcase(key, pattern) for pattern in patterns):
                self.latest[key] = metrics[key]

    def start(self) -> None:
        """Start drawing (``__enter__`` calls this)."""
        if not self.enabled or self._progress is not None or self._plain:
            return
        from rich.console import Console

        if self._console is None:
            self._console = Console()
        self._started_at = time.perf_counter()
        self._marks.append((self._started_at, self.step))
        if not self._console.is_terminal:
            self._plain = True
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.table import Column

        self._progress = Progress(
            BarColumn(bar_width=bar_width(self._console.width)),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn(
                "{task.description}",
                markup=False,
                table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1),
            ),
            console=self._console,
            expand=True,
        )
        self._task = self._progress.add_task(self.description(), total=self.total_steps, completed=self.step)
        self._progress.start()
        _ACTIVE.append(self._console)

    def _echo(self, text: str) -> None:
        assert self._console is not None
        self._console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)
        self._console.file.flush()

    def update(self, step: int, metrics: Mapping[str, Any] | None = None) -> None:
        """Set the number of completed steps to ``step`` and remember the tracked metrics' latest values; in a
        log, print the step's line."""
        self.step = int(step)
        if metrics:
            self._track(metrics)
        if self._plain:
            if self.step != self._marks[-1][1]:
                self._marks.append((time.perf_counter(), self.step))
            self._echo(self.line())
        elif self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self.step, description=self.description())

    @contextmanager
    def phase(self, text: str) -> Iterator[None]:
        """Say that a long phase (``text``: "validating after step 5") is running: a line in a log, the text
        in front of the metrics in a terminal until the block ends."""
        if self._plain:
            self._echo(f"{text} ...")
        self._set_phase(text)
        try:
            yield
        finally:
            self._set_phase("")

    def _set_phase(self, text: str) -> None:
        self._phase = f"{text}..." if text else ""
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=self.description())
            self._progress.refresh()

    def stop(self) -> None:
        """Stop drawing, leaving the final state on screen (``__exit__`` calls this)."""
        self._plain = False
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
