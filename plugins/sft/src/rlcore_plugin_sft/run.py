"""``rlcore sft``: resolve and check the SFT config, then train, with ``rlcore run``'s run directory.

Before any model loads this checks every key and value, the training backend (its ``check_config``), the
trackers, the model folder and the batch arithmetic, reporting every problem at once; it then writes
``config.yaml``, ``plugins.json`` and ``derived.json`` into ``trainer.runs_dir/<project>/<experiment>-<time>``,
trains, and writes ``summary.json`` there (and the report, with rlcore-plugin-report). A run ends as
``rlcore run``'s does (:mod:`rlcore.run_guard`): SIGINT/SIGTERM finish the step in progress
(:mod:`rlcore.graceful_stop`), write the summary with the status and exit with ``128 + signal``.
"""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from omegaconf import DictConfig

from rlcore.api import ConfigError, RLCoreError
from rlcore.checkpoint.fingerprint import check_allowed
from rlcore.config import Problems, config_to_yaml
from rlcore.config.output_paths import make_output_paths_absolute, shown_path
from rlcore.config.ranges import OPTIM_RANGES, range_problems
from rlcore.plugins import PluginManager, load_plugins
from rlcore.process_env import cpu_threads_setting, quiet_third_party, set_cpu_threads
from rlcore_plugin_sft.config import (
    ACTOR,
    SFTBatchSizes,
    load_sft_config,
    lower_config,
    sft_batch_sizes,
    sft_key_names,
    world_size,
)

if TYPE_CHECKING:
    from rlcore_plugin_sft.trainer import SFTTrainer


def _given_data(files: list[str], overrides: list[str]) -> bool:
    """Whether the command line names a config file or ``data.train_files``."""
    return bool(files) or any(o.lstrip("+").startswith("data.train_files=") for o in overrides)


def _check_backend(config: DictConfig, engine: DictConfig, manager: PluginManager) -> None:
    """The training backend ``model.strategy`` exists and accepts the settings (``check_config``)."""
    strategy = config.model.strategy
    try:
        backend = manager.registry.load("training_backend", strategy)
    except RLCoreError as exc:
        raise ConfigError(f"model.strategy={strategy}: {exc}") from exc
    check = getattr(backend, "check_config", None)
    if callable(check):
        try:
            check(engine, "actor", ACTOR, "actor_rollout_ref.model")
        except RLCoreError as exc:
            raise ConfigError(sft_key_names(str(exc))) from exc


def _import_external_lib(config: DictConfig) -> None:
    """Import ``model.external_lib`` (a module that registers custom models), naming the key on failure."""
    name = config.model.external_lib
    if not name:
        return
    try:
        importlib.import_module(str(name))
    except ImportError as exc:
        raise ConfigError(f"model.external_lib={name}: cannot import it ({exc})") from exc


def check_sft(config: DictConfig, manager: PluginManager, problems: Problems) -> tuple[DictConfig, SFTBatchSizes]:
    """Everything that can be checked before a model loads; problems are recorded in ``problems``."""
    from rlcore.tracking.external import preflight_trackers

    engine: Any = None
    sizes: Any = None
    with problems.collect():
        if not config.data.train_files:
            raise ConfigError("data.train_files is not set: pass data.train_files=PATH (parquet or jsonl)")
    with problems.collect():
        if not config.model.partial_pretrain:
            raise ConfigError("model.partial_pretrain is not set: pass model.partial_pretrain=MODEL_DIR")
    for message in range_problems(config.optim, "optim", OPTIM_RANGES):  # what the optimizer builder checks
        problems.add(message)
    known_backend = False
    with problems.collect():
        try:
            manager.registry.get("training_backend", config.model.strategy)
        except RLCoreError as exc:
            raise ConfigError(f"model.strategy={config.model.strategy}: {exc}") from exc
        known_backend = True
    with problems.collect():
        if known_backend:
            engine, sizes = lower_config(config, manager)
        else:  # the batch arithmetic without the backend's data-parallel layout
            sft_batch_sizes(config, world_size(config))
    if engine is not None:
        with problems.collect():
            _check_backend(config, engine, manager)
    with problems.collect():
        preflight_trackers(config, manager.registry)
    with problems.collect():
        _import_external_lib(config)
    with problems.collect():
        check_allowed(config.trainer.resume_allow_changes)
    return engine, sizes


def run_sft(files: list[str], overrides: list[str], *, dry_run: bool = False) -> dict[str, float]:
    """Everything ``rlcore sft`` does; returns the last metrics (empty for a dry run)."""
    from rlcore.run import check_writable, make_run_dir, plugins_line

    start = time.perf_counter()
    manager = load_plugins()
    for record in manager.problems():
        click.echo(f"warning: plugin {record.name} [{record.status}]: {record.error}", err=True)
    base = None
    if not _given_data(files, overrides):
        from rlcore_plugin_sft.arith import bundled_source

        click.echo("No config file or data.train_files given: fine-tuning on the bundled arithmetic task.")
        base = bundled_source()
    problems = Problems()
    config = load_sft_config(files, overrides, problems, base=base)
    quiet_third_party(str(config.trainer.device))
    engine, sizes = check_sft(config, manager, problems)
    cpu_threads = None
    with problems.collect():
        cpu_threads = cpu_threads_setting(config)
    problems.raise_if_any()
    click.echo(plugins_line(manager.versions()))
    click.echo(sizes.summary(int(config.data.train_batch_size)))
    if dry_run:
        click.echo(config_to_yaml(config), nl=False)
        return {}
    make_output_paths_absolute(config, ("trainer.default_local_dir", "trainer.runs_dir"))
    make_output_paths_absolute(engine, ("trainer.default_local_dir",))
    set_cpu_threads(cpu_threads)
    if base is not None:
        from rlcore_plugin_sft.arith import prepare_sft_assets

        prepare_sft_assets()
    from rlcore.model_check import check_model_paths

    try:
        check_model_paths(engine)
    except RLCoreError as exc:
        raise RLCoreError(sft_key_names(str(exc))) from exc
    check_writable(Path(config.trainer.default_local_dir), "trainer.default_local_dir")

    from rlcore.checkpoint import RunIdentity
    from rlcore.checkpoint.lock import lock_checkpoint_folder
    from rlcore.config.schema import TrainerConfig
    from rlcore_plugin_sft.trainer import SFTTrainer

    identity = RunIdentity.new(Path())
    lock = lock_checkpoint_folder(
        TrainerConfig.from_tree(engine), identity, saves=True
    )  # SFT saves at its end; one run per folder
    try:
        # the run directory is made once start-up has succeeded: a start-up error leaves nothing behind
        trainer = SFTTrainer(config, engine, sizes, Path(), manager.registry, identity)
        trainer.prepare()
        run_dir = trainer.run_dir = make_run_dir(config)
        identity.run_dir = str(run_dir)
        if lock is not None:
            lock.record(identity)
        (run_dir / "config.yaml").write_text(config_to_yaml(config))
        (run_dir / "plugins.json").write_text(
            json.dumps({r.name: {"version": r.version, "status": r.status} for r in manager.records.values()}, indent=2)
        )
        derived = {
            "dp_size": sizes.dp_size,
            "sequences_per_rank": sizes.per_rank,
            "micro_batch_size_per_gpu": sizes.micro,
        }
        (run_dir / "derived.json").write_text(json.dumps(derived, indent=2))
        click.echo(f"run directory: {shown_path(run_dir)}")

        last = _fit_and_summarise(trainer, engine, run_dir, start, manager)
    finally:
        if lock is not None:
            lock.release()
    return last


def _fit_and_summarise(
    trainer: SFTTrainer, engine: DictConfig, run_dir: Path, start: float, manager: PluginManager
) -> dict[str, float]:
    """Train, and end the run as ``rlcore run`` does (:func:`rlcore.run_guard.fit_to_the_end`): ``summary.json``
    with the status however the run ends; after SIGINT/SIGTERM (the step in progress finished, or abandoned at
    a second signal or after ``trainer.stop_grace_s``) the steps and checkpoint kept are printed and the exit
    status is ``128 + signal``; user code's ``SystemExit`` or ``KeyboardInterrupt`` is an error naming the line."""
    from rlcore.run import print_kept
    from rlcore.run_guard import fit_to_the_end

    return fit_to_the_end(
        trainer,
        lambda last, status: _summarise(run_dir, trainer, manager, time.perf_counter() - start, status),
        lambda abandoned: print_kept(trainer.trainer_section, run_dir, abandoned=abandoned),
    )


#: the validation metrics whose trend ``rlcore sft`` prints and ``summary.json`` records
TREND_KEYS: tuple[str, ...] = ("val/loss", "val/greedy_acc")


def _summarise(run_dir: Path, trainer: SFTTrainer, manager: PluginManager, wall: float, status: str) -> None:
    """Print the validation trends and the checkpoint, write ``summary.json`` (``kind: sft``, the trends) and
    name the metrics and what the plugins made of the run (:func:`rlcore.run.print_summary_lines`: the report
    of rlcore-plugin-report); :class:`RLCoreError` when ``summary.json`` cannot be written."""
    from rlcore.run import print_summary_lines
    from rlcore.tracking.sinks import read_metrics

    metrics_path = run_dir / "metrics.jsonl"
    rows = read_metrics(metrics_path) if metrics_path.is_file() else []
    click.echo("")
    trends = {}
    for key in TREND_KEYS:
        points = [(row["step"], row[key]) for row in rows if row.get(key) is not None]
        if points:
            trends[key] = {
                "first": points[0][1],
                "first_step": points[0][0],
                "last": points[-1][1],
                "last_step": points[-1][0],
            }
            click.echo(f"{key}: {points[0][1]:.3f} (step {points[0][0]}) -> {points[-1][1]:.3f} (step {points[-1][0]})")
    summary = {"kind": "sft", "status": status, "wall_time_s": round(wall, 1), "trends": trends, "last": trainer.last}
    try:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    except OSError as exc:
        raise RLCoreError(
            f"cannot write {shown_path(run_dir / 'summary.json')} ({exc.strerror or exc}); the run's metrics are in "
            f"{shown_path(metrics_path)}"
        ) from exc
    click.echo(f"wall time: {wall:.1f} s")
    if trainer.last_checkpoint is not None:
        click.echo(
            f"checkpoint:    {shown_path(trainer.last_checkpoint)} "
            f"(model: {shown_path(trainer.last_checkpoint / 'actor' / 'huggingface')})"
        )
    click.echo(f"run directory: {shown_path(run_dir)}")
    if not rows:  # nothing to plot: no step was logged
        return
    click.echo(f"metrics:       {shown_path(metrics_path)}")
    print_summary_lines(manager, run_dir, status)
