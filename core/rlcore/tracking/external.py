"""What the trackers that write to external experiment trackers (swanlab, wandb, tensorboard, mlflow) share.

Settings
    Each tracker reads its typed section of ``trainer.tracking`` (e.g. ``trainer.tracking.swanlab``, the
    ``Section`` its plugin's ``config_defaults`` mounts) with :func:`tracker_section`, and each value of it
    with :func:`setting_or_env`. The rule is the same for every key: **an explicit config value wins over the
    environment variable, which wins over the tracker's default** (the defaults in ``defaults.yaml`` are
    ``null``, meaning "not set"; the tracker's default is a named constant of its section). Default
    directories lie inside the run directory.
Run metadata
    :func:`run_metadata` gives the plugin versions, the rlcore version, the git commit of the working
    directory and the run directory; every tracker stores it, and the resolved config
    (:func:`resolved_config`), with its run.
Dependencies
    A tracker's library is imported only inside the tracker. :func:`preflight_trackers` imports the
    libraries of the trackers ``trainer.logger`` asks for (and checks their settings) before training
    starts, so a missing package is an error naming its ``pip install 'rlcore[...]'`` line, not a crash
    after the model has been loaded.
Failures
    :class:`ExternalTracker` makes :meth:`~ExternalTracker.finish` safe: it runs once and logs, instead of
    raising, whatever the library raises. :class:`~rlcore.tracking.sinks.TrackerSet` isolates ``log`` and
    ``log_table`` failures and :func:`~rlcore.tracking.sinks.build_trackers` those of the constructors.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from rlcore.errors import RLCoreError
from rlcore.tracking.sinks import Tracker, logger_names, to_json_value

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from rlcore.config.sections.base import Section
    from rlcore.registry import Registry

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_D = TypeVar("_D")
_S = TypeVar("_S", bound="Section")


class TrackerDependencyError(RLCoreError):
    """A tracker named in ``trainer.logger`` needs a package that is not installed (or fails to import)."""


class TrackerConfigError(RLCoreError):
    """A ``trainer.tracking`` setting (or the environment variable standing in for it) has a bad value."""


# ------------------------------------------------------------------------------------------ settings
def setting_or_env(value: _T | None, env: str | None, default: _D) -> _T | str | _D:
    """A tracker setting: ``value`` (the typed section's field) if set, else ``$env`` if set, else ``default``.

    A ``None`` value counts as "not set"; so does an unset or empty environment variable.
    """
    if value is not None:
        return value
    if env and os.environ.get(env):
        return os.environ[env]
    return default


def tracker_section(config: DictConfig, kind: type[_S]) -> _S:
    """The typed section ``kind`` (a tracker's ``trainer.tracking.<name>``, at its ``PATH``) of ``config``,
    with the section's own checks; a key the config lacks, or the whole section (a small hand-made config),
    keeps the section's default (``null``: not set)."""
    from rlcore.config.keys import select

    return kind.from_mapping(select(config, kind.PATH, {}))


_Choice = TypeVar("_Choice", bound=str)

#: a table cell as :func:`table_data` writes it
Cell = int | float | str | None


def check_choice(value: object, choices: Iterable[_Choice], what: str) -> _Choice:
    """Return the one of ``choices`` that ``str(value)`` equals; raise :class:`TrackerConfigError` otherwise.

    The result has the type of the choices, so a tuple of ``Literal`` strings gives a ``Literal``.
    """
    allowed = list(choices)
    text = str(value)
    for choice in allowed:
        if choice == text:
            return choice
    raise TrackerConfigError(f"{what} is {text!r}; expected one of {', '.join(allowed)}")


# ------------------------------------------------------------------------------------------ metadata
def git_commit(cwd: str | Path | None = None) -> str | None:
    """``git rev-parse HEAD`` in ``cwd`` (default: the current directory); ``None`` outside a repository."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = result.stdout.strip()
    return commit if result.returncode == 0 and commit else None


def resolved_config(config: DictConfig | Mapping[str, Any] | None) -> dict[str, Any]:
    """The config as a plain dict with interpolations resolved (unresolvable ones are kept as written)."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not isinstance(config, DictConfig):
        return dict(config or {})
    # a DictConfig converts to a dict with string keys
    try:
        return cast("dict[str, Any]", OmegaConf.to_container(config, resolve=True))
    except OmegaConfBaseException:  # an interpolation that cannot be resolved here (e.g. a missing env var)
        return cast("dict[str, Any]", OmegaConf.to_container(config, resolve=False))


def plugin_versions(run_dir: str | Path) -> dict[str, str | None]:
    """``{plugin: version}`` of the external plugins, from ``<run_dir>/plugins.json`` (written by ``rlcore run``
    and ``rlcore sft`` before the trackers start); none when the file is missing or unreadable (a tracker
    built outside a run)."""
    path = Path(run_dir) / "plugins.json"
    if path.is_file():
        try:
            records = json.loads(path.read_text(encoding="utf-8"))
            return {
                name: info.get("version")
                for name, info in records.items()
                if not info.get("builtin") and info.get("status", "ok") == "ok"
            }
        except (OSError, ValueError, AttributeError):
            logger.warning("could not read %s; no plugin versions are recorded with the run", path)
    return {}


def run_metadata(run_dir: str | Path) -> dict[str, Any]:
    """What every tracker stores with its run: rlcore version, plugin versions, git commit and run directory."""
    from rlcore import __version__

    return {
        "rlcore_version": __version__,
        "plugins": plugin_versions(run_dir),
        "git_commit": git_commit(),
        "run_dir": str(Path(run_dir).resolve()),
    }


# ------------------------------------------------------------------------------------------ values
def numeric_metrics(metrics: Mapping[str, object]) -> dict[str, float]:
    """The finite numeric values of ``metrics`` as floats (numpy/torch scalars included).

    Non-finite values (``metrics.jsonl`` writes them as ``null``) and non-numeric ones are left out.
    """
    out: dict[str, float] = {}
    for key, value in metrics.items():
        value = to_json_value(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[str(key)] = float(value)
    return out


def table_data(rows: Sequence[Mapping[str, object]], step: int) -> tuple[list[str], list[list[Cell]]]:
    """A table as ``(columns, data)``: ``step`` first, then every key of every row in first-seen order;
    cells are JSON-safe scalars (numbers, strings, ``None``; anything else as its ``str``)."""
    columns = ["step", *dict.fromkeys(str(key) for row in rows for key in row if key != "step")]
    data = [[int(step), *(_cell(row.get(column)) for column in columns[1:])] for row in rows]
    return columns, data


def _cell(value: object) -> Cell:
    value = to_json_value(value)
    return value if value is None or isinstance(value, (int, float, str)) else str(value)


def flatten(tree: object, prefix: str = "") -> dict[str, Any]:
    """Flatten nested dicts to dotted keys (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``); lists stay values."""
    if not isinstance(tree, Mapping):
        return {prefix: tree} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name))
        else:
            out[name] = value
    return out


# ---------------------------------------------------------------------------------- the base class
class ExternalTracker(Tracker):
    """Base class of the trackers backed by an optional library.

    Subclasses set :attr:`name` (their ``trainer.tracking`` section and registered name), :attr:`requires`
    (the modules to import) and :attr:`extra` (the ``rlcore[...]`` extra that installs them), may extend
    :meth:`check_settings`, and implement :meth:`start` (open the library's run; called by the
    constructor), :meth:`log` and :meth:`close`. The constructor sets :attr:`metadata` (see
    :func:`run_metadata`) and :attr:`config_dict` (the resolved config) before calling :meth:`start`.
    """

    #: the tracker's registered name and its section under ``trainer.tracking``
    name: ClassVar[str] = ""
    #: modules the tracker imports (checked by :meth:`preflight`)
    requires: ClassVar[tuple[str, ...]] = ()
    #: the ``rlcore[...]`` extra that installs :attr:`requires`
    extra: ClassVar[str] = ""

    def __init__(self, project: str, experiment: str, config: DictConfig, run_dir: str | Path) -> None:
        """Check the settings, gather the run metadata and start the library's run."""
        super().__init__(project, experiment, config, run_dir)
        self.check_settings(config)
        self.metadata = run_metadata(self.run_dir)
        self.config_dict = resolved_config(config)
        self._finished = False
        self.start()

    @classmethod
    def install_hint(cls) -> str:
        """The pip command that installs the tracker's dependencies."""
        return f"pip install 'rlcore[{cls.extra}]'" if cls.extra else f"pip install {' '.join(cls.requires)}"

    @classmethod
    def preflight(cls, config: DictConfig) -> None:
        """Import the tracker's dependencies and check its settings; raise a clear error before training."""
        for module in cls.requires:
            try:
                importlib.import_module(module)
            except Exception as exc:  # ImportError, or a broken install raising anything else on import
                raise TrackerDependencyError(
                    f"trainer.logger includes {cls.name!r}, but the {module!r} package "
                    f"{'is not installed' if isinstance(exc, ImportError) else 'fails to import'} "
                    f"({type(exc).__name__}: {exc}). Install it with: {cls.install_hint()} "
                    f"(or remove {cls.name!r} from trainer.logger)"
                ) from exc
        cls.check_settings(config)

    @classmethod
    def check_settings(cls, config: DictConfig) -> None:
        """Raise :class:`TrackerConfigError` for a bad ``trainer.tracking.<name>`` value; the default checks nothing."""

    def start(self) -> None:
        """Open the library's run (subclasses implement it)."""
        raise NotImplementedError(f"{type(self).__name__} must implement start()")

    def close(self) -> None:
        """Flush and close the library's run (subclasses implement it); :meth:`finish` calls it once."""

    def finish(self) -> None:
        """Close the run once; a failure is logged as a warning and never raised."""
        if self._finished:
            return
        self._finished = True
        try:
            self.close()
        except Exception as exc:  # a tracker must never stop (or fail) the run, not even at the end
            logger.warning("tracker %r failed to finish cleanly: %s: %s", self.name, type(exc).__name__, exc)


# ------------------------------------------------------------------------------------------ preflight
def preflight_trackers(config: DictConfig, registry: Registry) -> None:
    """Check, before training, every tracker ``trainer.logger`` names (plus ``jsonl``).

    Each name is resolved through ``registry`` (unknown names raise the registry's error); a tracker
    class with a ``preflight(config)`` classmethod (every :class:`ExternalTracker` has one; plugin trackers
    may add one) has it called, which imports the tracker's library and checks its settings. A missing
    library raises :class:`TrackerDependencyError` naming the ``pip install 'rlcore[...]'`` line.
    """
    for name in logger_names(config):
        cls = registry.load("tracker", name)
        check = getattr(cls, "preflight", None)
        if callable(check):
            check(config)
