"""The run machinery a plugin's own trainer runs on (a *trainer kind*: ``rlcore sft``, for one).

``rlcore run`` trains with the core's PPO loop; a plugin command that trains with a loop of its own uses the
same lifecycle through three objects (exported by :mod:`rlcore.api`):

- :class:`RunKit` (:meth:`RunKit.load`): the loaded plugins and their registry, the process settings
  (quiet third-party libraries, ``trainer.cpu_threads``), the checks before any model loads (the trackers
  of ``trainer.logger``, ``trainer.resume_allow_changes``), the presets a bundled task uses, and
  :meth:`RunKit.open_run`;
- :class:`PluginRun`: one run, holding ``trainer.default_local_dir``'s lock: its identity, the run directory
  (``trainer.runs_dir/<project>/<experiment>-<time>`` with ``config.yaml``, ``plugins.json`` and
  ``derived.json``), the worker groups, trackers, progress bar and stop request (SIGINT/SIGTERM finish the step
  in progress), and :meth:`PluginRun.fit_to_the_end`, which ends the run as ``rlcore run``'s ends
  (``summary.json`` with the status however it ends, exit status ``128 + signal`` after a stop signal);
- :class:`RunCheckpoints` (:attr:`PluginRun.checkpoints`): atomic ``global_step_N`` checkpoints with the run's
  fingerprint, which resume exactly (``trainer.resume_mode``) and refuse another run's.

The plugin's config needs the ``trainer`` keys these read (``runs_dir``, ``project_name``,
``experiment_name``, ``logger``, ``progress_bar``, ``stop_grace_s``, ``cpu_threads``, ``device``,
``resume_allow_changes``); the checkpoint settings are read from an RL-tree config's ``trainer`` section (the
one the workers read).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from omegaconf import DictConfig

from rlcore.checkpoint.ownership import RunIdentity
from rlcore.config.output_paths import make_output_paths_absolute, shown_path
from rlcore.config.problems import Problems
from rlcore.config.sections.trainer import TrainerConfig
from rlcore.plugins import PluginManager, load_plugins

if TYPE_CHECKING:
    from rlcore.api.groups import WorkerGroup
    from rlcore.checkpoint.lock import FolderLock
    from rlcore.graceful_stop import StopRequest
    from rlcore.registry import Registry
    from rlcore.tracking.progress import ProgressBar
    from rlcore.tracking.sinks import TrackerSet

#: ``summarise(last_metrics, status)``: print the run's end and write ``summary.json`` (see
#: :meth:`PluginRun.fit_to_the_end`)
Summarise = Callable[[dict[str, Any], str], None]


@dataclass
class RunKit:
    """The core's run machinery for a plugin command that trains with its own loop (see the module docstring).

    Attributes:
        manager: the loaded plugins (their hooks, versions and records).
        started: ``time.perf_counter()`` when the command started (the run's wall time counts from it).
        cpu_threads: ``trainer.cpu_threads`` as :meth:`check` read it (set by :meth:`begin`).
    """

    manager: PluginManager
    started: float = field(default_factory=time.perf_counter)
    cpu_threads: int | None = None

    @classmethod
    def load(cls) -> RunKit:
        """Load the plugins (a warning for each one that failed to load) and start the wall clock."""
        started = time.perf_counter()
        manager = load_plugins()
        for record in manager.problems():
            click.echo(f"warning: plugin {record.name} [{record.status}]: {record.error}", err=True)
        return cls(manager, started)

    @property
    def registry(self) -> Registry:
        """The components of every loaded plugin."""
        return self.manager.registry

    def quiet_libraries(self, config: DictConfig) -> None:
        """Set what third-party libraries read at import for ``trainer.device`` (DeepSpeed's accelerator) and
        turn off Hugging Face's progress bars; call it before anything imports them."""
        from rlcore.process_env import quiet_third_party

        quiet_third_party(str(config.trainer.device))

    def check(self, config: DictConfig, problems: Problems) -> None:
        """The core's checks of a run's ``trainer`` keys before anything starts, recorded in ``problems``: every
        tracker of ``trainer.logger`` (its settings and dependencies), ``trainer.resume_allow_changes`` and
        ``trainer.cpu_threads`` (applied by :meth:`begin`)."""
        from rlcore.checkpoint.fingerprint import check_allowed
        from rlcore.process_env import cpu_threads_setting
        from rlcore.tracking.external import preflight_trackers

        with problems.collect():
            preflight_trackers(config, self.registry)
        with problems.collect():
            check_allowed(config.trainer.resume_allow_changes)
        with problems.collect():
            self.cpu_threads = cpu_threads_setting(config)

    def plugins_line(self) -> str:
        """``plugins: N installed (rlcore plugins lists them)``, the line a run prints before its plan."""
        from rlcore.run import plugins_line

        return plugins_line(self.manager.versions())

    def preset_settings(self, name: str) -> dict[str, Any]:
        """The nested settings of the preset ``name`` (an unknown preset's error names the distribution to
        install)."""
        from rlcore.config.loader import preset_fragment

        return preset_fragment(name, self.manager)

    def prepare_presets(self, names: Iterable[str]) -> None:
        """Run the ``prepare`` of each preset of ``names`` (writes a bundled task's data and model, cached)."""
        from rlcore.run import prepare_presets

        prepare_presets(self.manager, list(names), None)

    def check_model(self, config: DictConfig) -> None:
        """Check the model folders of an RL-tree ``config`` (``actor_rollout_ref.model.path``, ...) before
        anything loads: valid ``config.json``, intact weights, a tokenizer."""
        from rlcore.model_check import check_model_paths

        check_model_paths(config)

    def begin(self, config: DictConfig, checkpoints: DictConfig) -> None:
        """Past the checks, before anything is written: the output paths of ``config`` (the plugin's config:
        ``trainer.default_local_dir`` and ``trainer.runs_dir``) and of the RL-tree config ``checkpoints``
        (``trainer.default_local_dir``) made absolute, and torch's CPU threads set (``trainer.cpu_threads``)."""
        from rlcore.process_env import set_cpu_threads

        make_output_paths_absolute(config, ("trainer.default_local_dir", "trainer.runs_dir"))
        make_output_paths_absolute(checkpoints, ("trainer.default_local_dir",))
        set_cpu_threads(self.cpu_threads)

    @contextmanager
    def open_run(self, config: DictConfig, checkpoints: DictConfig, *, saves: bool = True) -> Iterator[PluginRun]:
        """A run of ``config`` (the plugin's config: its ``trainer`` keys) whose checkpoints follow the
        ``trainer`` section of the RL-tree config ``checkpoints`` (after :meth:`begin`): its
        ``trainer.default_local_dir`` checked writable and locked for the run, released when the block ends
        (``saves``: whether the run saves checkpoints there). The run directory is made by
        :meth:`PluginRun.make_dir`, once start-up has succeeded: a start-up error leaves nothing behind."""
        from rlcore.checkpoint.lock import lock_checkpoint_folder
        from rlcore.run import check_writable

        section = TrainerConfig.from_tree(checkpoints)
        check_writable(Path(section.default_local_dir), "trainer.default_local_dir")
        identity = RunIdentity.new(Path())
        lock = lock_checkpoint_folder(section, identity, saves=saves)
        try:
            yield PluginRun(self, config, section, identity, lock)
        finally:
            if lock is not None:
                lock.release()


@dataclass
class RunCheckpoints:
    """A run's checkpoints in ``trainer.default_local_dir``: ``global_step_N`` folders published atomically,
    each with the run's fingerprint (:attr:`identity`), the worker's part written by the trainer and the
    trainer's own state (``trainer_state.json``).

    Attributes:
        trainer: the ``trainer`` section the checkpoints follow (folder, ``resume_mode``, ``save_freq``, ...).
        identity: the run's identity; set ``identity.fingerprint`` (:meth:`fingerprint`) before :meth:`accept`.
    """

    trainer: TrainerConfig
    identity: RunIdentity

    @staticmethod
    def fingerprint(kind: str, *, model_path: str, model_config: dict[str, Any], train_files: Any) -> dict[str, Any]:
        """What defines a run of ``kind`` (``"sft"``): the model (its path, weights and shape, read from its
        Hugging Face ``model_config`` dict) and the training files. A checkpoint of a run with another
        fingerprint is refused on resume, except for the parts ``trainer.resume_allow_changes`` allows."""
        from rlcore.checkpoint.fingerprint import model_shape, run_fingerprint

        return run_fingerprint(
            kind,
            model_path=model_path,
            tokenizer_path=None,
            algorithm={"objective": kind},
            train_files=train_files,
            shape=model_shape(model_config) if model_config else {},
        )

    def resume_candidate(self) -> Path | None:
        """The checkpoint ``trainer.resume_mode`` selects (``auto``: the newest in the folder); None to start
        fresh."""
        from rlcore.checkpoint import resume_path

        return resume_path(self.trainer)

    def accept(self, path: Path, total_steps: int) -> Path | None:
        """``path`` when it is a checkpoint of this run (its fingerprint matches, up to
        ``trainer.resume_allow_changes``) with steps left before ``total_steps``; None to start fresh, said on
        the console, for another run's or a finished checkpoint that ``resume_mode=auto`` found. Raises
        :class:`RLCoreError` for such a checkpoint the run was told to resume (``trainer.resume_from_path``)."""
        from rlcore.checkpoint import read_trainer_state
        from rlcore.checkpoint.fingerprint import accept_checkpoint
        from rlcore.controller.resume import unfinished_checkpoint

        accepted = accept_checkpoint(
            path,
            self.identity.fingerprint or {},
            resume_mode=self.trainer.resume_mode,
            allow=self.trainer.resume_allow_changes,
        )
        if accepted is None:
            return None
        step = int(read_trainer_state(accepted)["global_step"])
        return unfinished_checkpoint(accepted, step, total_steps, self.trainer.resume_mode)

    def claim(self, resume_from: Path | None, *, saves: bool = True) -> None:
        """Make this run continue the lineage of ``resume_from``; a fresh run that ``saves`` moves the
        checkpoints of another run in the folder aside."""
        from rlcore.checkpoint import claim_checkpoints

        claim_checkpoints(self.trainer, self.identity, resume_from, saves=saves)

    def save(self, step: int, state: dict[str, Any], write: Callable[[Path], None]) -> Path:
        """Save the checkpoint of ``step``: ``write(folder)`` writes the workers' part into the fresh folder,
        ``state`` (the step, the loader's position, ...) becomes its ``trainer_state.json``; published
        atomically and rotated (``trainer.max_actor_ckpt_to_keep``). Returns the checkpoint's folder."""
        from rlcore.checkpoint import CheckpointManager, write_trainer_state

        def write_all(folder: Path) -> None:
            write(folder)
            write_trainer_state(folder, state)

        return CheckpointManager(self.trainer, self.identity).save(step, write_all)

    @staticmethod
    def state(path: Path) -> dict[str, Any]:
        """The ``trainer_state.json`` of the checkpoint ``path`` (an error names the file when missing or
        broken)."""
        from rlcore.checkpoint import read_trainer_state

        return read_trainer_state(path)


@dataclass
class PluginRun:
    """One run of a plugin's trainer, made by :meth:`RunKit.open_run` (see the module docstring).

    Attributes:
        kit: the run machinery (plugins, registry).
        config: the plugin's config.
        trainer: the ``trainer`` section its checkpoints follow.
        identity: the run's identity (checkpoints and the folder lock record it).
        run_dir: the run directory, once :meth:`make_dir` made it.
    """

    kit: RunKit
    config: DictConfig
    trainer: TrainerConfig
    identity: RunIdentity
    lock: FolderLock | None = None
    run_dir: Path | None = None
    checkpoints: RunCheckpoints = field(init=False)
    stop: StopRequest = field(init=False)

    def __post_init__(self) -> None:
        """The checkpoints and the stop request (``trainer.stop_grace_s``) of the run."""
        from rlcore.graceful_stop import StopRequest

        self.checkpoints = RunCheckpoints(self.trainer, self.identity)
        self.stop = StopRequest(self.config.trainer.stop_grace_s)

    @property
    def directory(self) -> Path:
        """The run directory; an error before :meth:`make_dir`."""
        if self.run_dir is None:
            raise RuntimeError("the run directory is made by PluginRun.make_dir()")
        return self.run_dir

    def make_dir(self, derived: dict[str, Any]) -> Path:
        """Make the run directory with ``config.yaml`` (the resolved config), ``plugins.json`` (each plugin's
        version and status) and ``derived.json`` (``derived``: the batch arithmetic); say where it is."""
        from rlcore.config.loader import config_to_yaml
        from rlcore.run import make_run_dir

        run_dir = self.run_dir = make_run_dir(self.config)
        self.identity.run_dir = str(run_dir)
        if self.lock is not None:
            self.lock.record(self.identity)
        (run_dir / "config.yaml").write_text(config_to_yaml(self.config))
        records = self.kit.manager.records.values()
        (run_dir / "plugins.json").write_text(
            json.dumps({r.name: {"version": r.version, "status": r.status} for r in records}, indent=2)
        )
        (run_dir / "derived.json").write_text(json.dumps(derived, indent=2))
        click.echo(f"run directory: {shown_path(run_dir)}")
        return run_dir

    def worker_group(self, worker: str, config: DictConfig, role: str) -> WorkerGroup:
        """The group of ``worker`` (``"module:Class"``, a :class:`~rlcore.api.WorkerBase` subclass) for ``role``
        on the executor of ``config``'s ``trainer.executor`` (in this process, or one Ray actor per rank); each
        rank reads the RL-tree ``config``."""
        from rlcore.controller.worker_group import make_worker_group
        from rlcore.controller.worker_spec import WorkerSpec

        return make_worker_group(WorkerSpec(worker), config, role)

    def trackers(self) -> TrackerSet:
        """The run's trackers (``trainer.logger``, plus ``metrics.jsonl`` in the run directory): ``log(metrics,
        step=...)``, then ``finish()``."""
        from rlcore.tracking.sinks import build_trackers

        return build_trackers(self.config, self.directory, self.kit.registry)

    def progress(
        self, total_steps: int, *, initial_step: int, keys: Iterable[str], line_keys: Iterable[tuple[str, str]]
    ) -> ProgressBar:
        """The console's progress bar (``trainer.progress_bar``; a log line per step otherwise) showing the
        metrics ``keys`` after the bar and ``line_keys`` (label, key) in a log line."""
        from rlcore.tracking.progress import ProgressBar

        return ProgressBar(
            total_steps,
            enabled=self.config.trainer.progress_bar,
            initial_step=initial_step,
            keys=keys,
            line_keys=line_keys,
        )

    def fit_to_the_end(self, trainer: Any, summarise: Summarise) -> dict[str, Any]:
        """Train ``trainer`` (its ``fit()``, its ``stop``, this run's :attr:`stop`, and ``last``, the last
        metrics) and end the run however it ends, as ``rlcore run``'s ends: ``summarise(last, status)`` writes
        the summary (also when the run fails or a stop signal comes); after SIGINT/SIGTERM the steps and
        checkpoint kept are printed and :class:`SystemExit` carries ``128 + signal``. Returns the last metrics
        of a completed run."""
        from rlcore.run import print_kept
        from rlcore.run_guard import fit_to_the_end

        run_dir = self.directory
        return fit_to_the_end(
            trainer, summarise, lambda abandoned: print_kept(self.trainer, run_dir, abandoned=abandoned)
        )

    def print_summary_lines(self, status: str) -> None:
        """Print what the plugins make of the finished run (the ``summary_lines`` hook: the report of
        rlcore-plugin-report), once ``summary.json`` is written and a step was logged."""
        from rlcore.run import print_summary_lines

        print_summary_lines(self.kit.manager, self.directory, status)

    def wall_time(self) -> float:
        """Seconds since the command started."""
        return time.perf_counter() - self.kit.started
