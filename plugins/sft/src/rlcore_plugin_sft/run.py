"""``rlcore sft``: resolve and check the SFT config, then train, with ``rlcore run``'s run directory.

Before any model loads this checks every key and value, the training backend (its ``check_config``), the
trackers, the model folder and the batch arithmetic, reporting every problem at once; it then writes
``config.yaml``, ``plugins.json`` and ``derived.json`` into ``trainer.runs_dir/<project>/<experiment>-<time>``,
trains, and writes ``summary.json`` there (and the report, with rlcore-plugin-report). A run ends as
``rlcore run``'s does (the core's run machinery, :class:`rlcore.api.RunKit`): SIGINT/SIGTERM finish the step
in progress, write the summary with the status and exit with ``128 + signal``.
"""

from __future__ import annotations

import importlib
import json
from typing import TYPE_CHECKING, Any

import click
from omegaconf import DictConfig

from rlcore.api import (
    OPTIM_RANGES,
    ConfigError,
    PluginRun,
    Problems,
    RLCoreError,
    RunKit,
    config_to_yaml,
    range_problems,
    read_metrics,
    shown_path,
)
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


def _check_backend(config: DictConfig, engine: DictConfig, kit: RunKit) -> None:
    """The training backend ``model.strategy`` exists and accepts the settings (``check_config``)."""
    strategy = config.model.strategy
    try:
        backend = kit.registry.load("training_backend", strategy)
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


def check_sft(config: DictConfig, kit: RunKit, problems: Problems) -> tuple[DictConfig, SFTBatchSizes]:
    """Everything that can be checked before a model loads; problems are recorded in ``problems``."""
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
            kit.registry.get("training_backend", config.model.strategy)
        except RLCoreError as exc:
            raise ConfigError(f"model.strategy={config.model.strategy}: {exc}") from exc
        known_backend = True
    with problems.collect():
        if known_backend:
            engine, sizes = lower_config(config, kit)
        else:  # the batch arithmetic without the backend's data-parallel layout
            sft_batch_sizes(config, world_size(config))
    if engine is not None:
        with problems.collect():
            _check_backend(config, engine, kit)
    with problems.collect():
        _import_external_lib(config)
    kit.check(config, problems)
    return engine, sizes


def run_sft(files: list[str], overrides: list[str], *, dry_run: bool = False) -> dict[str, float]:
    """Everything ``rlcore sft`` does; returns the last metrics (empty for a dry run)."""
    kit = RunKit.load()
    base = None
    if not _given_data(files, overrides):
        from rlcore_plugin_sft.arith import bundled_source

        click.echo("No config file or data.train_files given: fine-tuning on the bundled arithmetic task.")
        base = bundled_source(kit)
    problems = Problems()
    config = load_sft_config(files, overrides, problems, base=base)
    kit.quiet_libraries(config)
    engine, sizes = check_sft(config, kit, problems)
    problems.raise_if_any()
    click.echo(kit.plugins_line())
    click.echo(sizes.summary(int(config.data.train_batch_size)))
    if dry_run:
        click.echo(config_to_yaml(config), nl=False)
        return {}
    kit.begin(config, engine)
    if base is not None:
        from rlcore_plugin_sft.arith import prepare_sft_assets

        prepare_sft_assets(kit)
    try:
        kit.check_model(engine)
    except RLCoreError as exc:
        raise RLCoreError(sft_key_names(str(exc))) from exc

    from rlcore_plugin_sft.trainer import SFTTrainer

    with kit.open_run(config, engine, saves=True) as run:  # SFT saves at its end; one run per folder
        # the run directory is made once start-up has succeeded: a start-up error leaves nothing behind
        trainer = SFTTrainer(config, engine, sizes, run)
        trainer.prepare()
        run.make_dir(
            {"dp_size": sizes.dp_size, "sequences_per_rank": sizes.per_rank, "micro_batch_size_per_gpu": sizes.micro}
        )
        return _fit_and_summarise(trainer, run)


def _fit_and_summarise(trainer: SFTTrainer, run: PluginRun) -> dict[str, float]:
    """Train, and end the run as ``rlcore run`` does (:meth:`rlcore.api.PluginRun.fit_to_the_end`):
    ``summary.json`` with the status however the run ends; after SIGINT/SIGTERM (the step in progress finished,
    or abandoned at a second signal or after ``trainer.stop_grace_s``) the steps and checkpoint kept are printed
    and the exit status is ``128 + signal``; user code's ``SystemExit`` or ``KeyboardInterrupt`` is an error
    naming the line."""
    return run.fit_to_the_end(trainer, lambda last, status: _summarise(run, trainer, status))


#: the validation metrics whose trend ``rlcore sft`` prints and ``summary.json`` records
TREND_KEYS: tuple[str, ...] = ("val/loss", "val/greedy_acc")


def _summarise(run: PluginRun, trainer: SFTTrainer, status: str) -> None:
    """Print the validation trends and the checkpoint, write ``summary.json`` (``kind: sft``, the trends) and
    name the metrics and what the plugins made of the run (:meth:`rlcore.api.PluginRun.print_summary_lines`:
    the report of rlcore-plugin-report); :class:`RLCoreError` when ``summary.json`` cannot be written."""
    run_dir = run.directory
    wall = run.wall_time()
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
    run.print_summary_lines(status)
