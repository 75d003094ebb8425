"""Metric sinks ("trackers"): the interface, the console and JSONL trackers, and the fan-out set.

A tracker is a component of kind ``tracker`` selected by ``trainer.logger``. The controller builds all
of them once with :func:`build_trackers` before training starts and then calls, once per step,
``trackers.log(metrics, step)`` and at the end ``trackers.finish()``. The ``jsonl`` tracker (verl's
``file`` logger) is always on:
``<run_dir>/metrics.jsonl`` is the run's own record, read back by :func:`read_metrics`, the reward plot
and ``rlcore`` commands.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

from rlcore.errors import RLCoreError
from rlcore.tracking.values import format_value, to_json_value

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from rlcore.registry import Registry

logger = logging.getLogger(__name__)

#: the name of the JSONL metrics file inside a run directory
METRICS_FILE = "metrics.jsonl"
#: the tracker added to every run, whatever ``trainer.logger`` says
ALWAYS_ON = "jsonl"
#: where verl's ``file`` logger writes (a file, or a folder of ``<project>/<experiment>.jsonl``); rlcore does not
VERL_FILE_LOGGER_VARS = ("VERL_FILE_LOGGER_PATH", "VERL_FILE_LOGGER_ROOT")


class Tracker:
    """The tracker interface; plugins may subclass it or provide the same methods (duck typing).

    The registry constructs a tracker as ``cls(project=..., experiment=..., config=..., run_dir=...)``:

    ``project``, ``experiment``
        ``trainer.project_name`` and ``trainer.experiment_name``.
    ``config``
        the run's full (resolved) config, a ``DictConfig``; read optional keys with ``.get``.
    ``run_dir``
        the run directory, which exists; a tracker that writes files writes them there.

    Methods: :meth:`log` once per step (``metrics`` maps verl-style names such as ``critic/score/mean``
    to numbers, which may be ``nan``, numpy or torch scalars), :meth:`log_table` for row data such as
    validation generations (optional, a no-op by default) and :meth:`finish` once at the end. A tracker
    that raises is reported once and disabled by :class:`TrackerSet`; it never stops training.

    A tracker class may also have a ``preflight(config)`` classmethod: ``rlcore run`` calls it before any
    model is loaded (see :func:`rlcore.tracking.external.preflight_trackers`) to import the tracker's
    library and check its settings, raising :class:`RLCoreError` with a clear message.
    """

    def __init__(self, project: str, experiment: str, config: DictConfig, run_dir: str | Path) -> None:
        """Store the run's identity, its config and its directory."""
        self.project = project
        self.experiment = experiment
        self.config = config
        self.run_dir = Path(run_dir)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Record the metrics of one step."""
        raise NotImplementedError(f"{type(self).__name__} must implement log(metrics, step)")

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        """Record a table (a list of rows with the same keys) at ``step``; the default does nothing."""

    def finish(self) -> None:
        """Flush and close whatever the tracker holds; the default does nothing."""


def format_metrics_line(metrics: Mapping[str, Any], step: int) -> str:
    """The verl console line: ``step:N - key:value - key:value`` with the keys sorted."""
    parts = [f"step:{step}"]
    parts.extend(f"{key}:{format_value(metrics[key])}" for key in sorted(metrics))
    return " - ".join(parts)


# --------------------------------------------------------------------------------------- trackers
class ConsoleTracker(Tracker):
    """Prints one verl-style ``step:N - key:value - ...`` line per step.

    While a :class:`~rlcore.tracking.progress.ProgressBar` is live the line goes through its rich
    ``Console``, so it is printed above the bar instead of tearing it; otherwise it is a plain ``print``.
    """

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Print the step's line."""
        from rlcore.tracking.progress import active_console  # progress imports this module

        line = format_metrics_line(metrics, step)
        console = active_console()
        if console is None:
            print(line, flush=True)
        else:
            console.print(line, markup=False, highlight=False, emoji=False, soft_wrap=True)


class JsonlTracker(Tracker):
    """Appends ``{"step": N, ...metrics}`` to ``<run_dir>/metrics.jsonl``, one flushed line per step.

    Every line is flushed as soon as it is written, so a crash loses no logged step. Non-finite floats are
    written as ``null`` and numpy/torch scalars as plain numbers (see :func:`to_json_value`), so each line
    is valid JSON. :meth:`log_table` appends the rows, each with its ``step``, to
    ``<run_dir>/tables/<name>.jsonl``.
    """

    def __init__(self, project: str, experiment: str, config: DictConfig, run_dir: str | Path) -> None:
        """Create the run directory if needed and open the metrics file for appending."""
        super().__init__(project, experiment, config, run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        self._file: IO[str] | None = None

    def _handle(self) -> IO[str]:
        if self._file is None or self._file.closed:
            self._file = self.path.open("a", encoding="utf-8")
        return self._file

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Append and flush the step's line."""
        record: dict[str, Any] = {"step": int(step)}
        record.update((str(key), to_json_value(value)) for key, value in metrics.items() if key != "step")
        handle = self._handle()
        handle.write(json.dumps(record, allow_nan=False) + "\n")
        handle.flush()

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        """Append the rows, each with ``"step"``, to ``<run_dir>/tables/<name>.jsonl``."""
        safe_name = re.sub(r"[^\w.\-]+", "_", name).strip("._") or "table"
        path = self.run_dir / "tables" / f"{safe_name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            for row in rows:
                record = {"step": int(step), **{str(k): to_json_value(v) for k, v in row.items() if k != "step"}}
                handle.write(json.dumps(record, allow_nan=False) + "\n")

    def finish(self) -> None:
        """Close the metrics file (a later :meth:`log` reopens it)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Read a ``metrics.jsonl`` file (or a run directory holding one) into a list of step records.

    ``null`` values come back as ``None``. A truncated last line, as left by a crash in the middle of a
    write, is skipped; any other malformed line raises :class:`RLCoreError` naming the file and line.
    """
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.is_file():
        raise RLCoreError(f"metrics file {path} does not exist")
    lines = path.read_text(encoding="utf-8").splitlines()
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                logger.warning("%s: skipping the truncated last line %d", path, number)
                continue
            raise RLCoreError(f"{path}:{number}: not a JSON object: {exc}") from exc
        if not isinstance(record, dict):
            raise RLCoreError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        records.append(record)
    return records


# ------------------------------------------------------------------------------------ tracker set
class TrackerSet:
    """Fans ``log``/``log_table``/``finish`` out to several trackers, isolating their failures.

    A tracker that raises is reported once (a ``logging.warning`` naming it and the error) and disabled
    for the rest of the run; the other trackers and the training go on. Usable as a context manager
    that calls :meth:`finish` on exit.
    """

    def __init__(self, trackers: Mapping[str, Any] | Iterable[Any], failed: Mapping[str, str] | None = None) -> None:
        """Take trackers by name (a mapping) or as an iterable (named after their classes).

        ``failed`` maps the names of trackers that could not even be constructed to their error; they are
        listed in :attr:`disabled` from the start.
        """
        if isinstance(trackers, Mapping):
            items = list(trackers.items())
        else:
            items = [(type(t).__name__, t) for t in trackers]
        self._trackers: dict[str, Any] = {}
        for name, tracker in items:
            unique, n = name, 2
            while unique in self._trackers:
                unique, n = f"{name}#{n}", n + 1
            self._trackers[unique] = tracker
        #: name -> error of each tracker disabled after a failure
        self.disabled: dict[str, str] = dict(failed or {})
        self._finished = False

    @property
    def names(self) -> list[str]:
        """The names of all trackers, in order."""
        return list(self._trackers)

    @property
    def active(self) -> list[str]:
        """The names of the trackers that have not failed."""
        return [name for name in self._trackers if name not in self.disabled]

    def __getitem__(self, name: str) -> Any:
        """The tracker called ``name``."""
        return self._trackers[name]

    def __len__(self) -> int:
        """The number of trackers, failed ones included."""
        return len(self._trackers)

    def _call(self, method: str, *args: Any) -> None:
        for name in self.active:
            function = getattr(self._trackers[name], method, None)
            if not callable(function):  # e.g. a duck-typed tracker without log_table
                continue
            try:
                function(*args)
            except Exception as exc:  # a metrics sink must never stop training
                self.disabled[name] = f"{type(exc).__name__}: {exc}"
                logger.warning(
                    "tracker %r failed in %s() and is disabled for the rest of the run: %s: %s",
                    name,
                    method,
                    type(exc).__name__,
                    exc,
                )

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Log one step's metrics to every active tracker."""
        self._call("log", metrics, step)

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        """Log a table to every active tracker that has ``log_table``."""
        self._call("log_table", name, rows, step)

    def finish(self) -> None:
        """Finish every active tracker; calling it again does nothing."""
        if self._finished:
            return
        self._finished = True
        self._call("finish")

    def __enter__(self) -> TrackerSet:
        """Return the set itself."""
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Finish the trackers, whether the block succeeded or not."""
        self.finish()


# ----------------------------------------------------------------------------------- construction
def logger_names(config: DictConfig) -> list[str]:
    """The tracker names of a run: ``trainer.logger`` (a list or a single string), plus ``jsonl``."""
    trainer = config.get("trainer") or {}
    raw = trainer.get("logger")
    if raw is None:
        names: list[str] = []
    elif isinstance(raw, str):
        names = [part.strip() for part in raw.split(",") if part.strip()]
    else:
        names = [str(part).strip() for part in raw if str(part).strip()]
    if ALWAYS_ON not in names:
        names.append(ALWAYS_ON)
    return list(dict.fromkeys(names))


def file_logger_notes(config: DictConfig) -> list[str]:
    """The run plan's note when ``trainer.logger`` names verl's ``file`` logger while one of
    :data:`VERL_FILE_LOGGER_VARS` is set: rlcore's JSONL sink writes ``<run_dir>/metrics.jsonl`` only."""
    import os

    if "file" not in logger_names(config):
        return []
    given = [f"{name}={os.environ[name]}" for name in VERL_FILE_LOGGER_VARS if os.environ.get(name)]
    if not given:
        return []
    return [
        f"trainer.logger=file is rlcore's JSONL sink: the metrics go to <run_dir>/{METRICS_FILE} as flat "
        f'{{"step": N, "<metric>": value}} lines; {", ".join(given)} is not read'
    ]


def build_trackers(config: DictConfig, run_dir: str | Path, registry: Registry) -> TrackerSet:
    """Build the run's trackers from ``trainer.logger`` (``jsonl`` is always added).

    Every name is resolved in ``registry`` (the run's, which ``rlcore run`` checked them in) before any tracker is
    constructed, so an unknown name raises the registry's error (which lists the known trackers) before
    training starts; names of the same tracker (an alias: ``file`` is ``jsonl``) give one tracker, under its
    registered name. Each tracker is constructed with ``project=trainer.project_name``,
    ``experiment=trainer.experiment_name``, ``config`` and ``run_dir``. A constructor that raises
    :class:`RLCoreError` (a bad setting) stops the run; one that fails otherwise (an unwritable directory,
    no network, the library raising) is reported once and the tracker is disabled, like a tracker failing
    later (see :class:`TrackerSet`) — except ``jsonl``, the run's own record, whose failure raises
    :class:`RLCoreError`. Missing libraries are caught earlier, by
    :func:`rlcore.tracking.external.preflight_trackers`.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    trainer = config.get("trainer") or {}
    project = str(trainer.get("project_name") or "rlcore")
    experiment = str(trainer.get("experiment_name") or "run")
    classes: dict[str, Any] = {}
    for name in logger_names(config):
        component = registry.get("tracker", name)
        classes.setdefault(component.name, component.load())  # an alias (file -> jsonl) is built once
    trackers: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for name, cls in classes.items():
        try:
            trackers[name] = cls(project=project, experiment=experiment, config=config, run_dir=run_dir)
        except RLCoreError:
            raise
        except Exception as exc:
            if name == ALWAYS_ON:
                raise RLCoreError(f"tracker {name!r} could not be started: {type(exc).__name__}: {exc}") from exc
            failed[name] = f"{type(exc).__name__}: {exc}"
            logger.warning("tracker %r could not be started and is disabled for this run: %s", name, failed[name])
    return TrackerSet(trackers, failed=failed)
