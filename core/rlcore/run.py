"""``rlcore run``: resolve the config, check everything that can be checked, then train.

Before any model, dataset or worker is created this resolves every component the config names (so an
unknown or conflicting name costs seconds), checks the batch arithmetic and prints the derived quantities.
The run directory is created only once the checkpoint to resume, the tokenizer and the datasets are ready
(a start-up error leaves none behind); it then receives the resolved config, the plugin versions, the batch
arithmetic and the presets with the keys each one set.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from omegaconf import DictConfig

from rlcore.agents.seam import run_multi_turn
from rlcore.checkpoint import saves_checkpoints
from rlcore.checkpoint.callback import check_checkpoint_callback
from rlcore.checkpoint.fingerprint import check_allowed
from rlcore.config import (
    ConfigError,
    Problems,
    check_values,
    config_to_yaml,
    derive_quantities,
    load_config,
)
from rlcore.config.async_training import async_plan
from rlcore.config.async_training import plan_line as async_plan_line
from rlcore.config.lanes import lane_plan_lines
from rlcore.config.noted_keys import noted_plan_lines
from rlcore.config.output_paths import make_output_paths_absolute, shown_path
from rlcore.config.rollout_pool import plan_line as rollout_pool_plan_line
from rlcore.config.sections.data import SamplerConfig
from rlcore.config.sections.trainer import TrainerConfig
from rlcore.controller.components import RunComponents
from rlcore.controller.health import health_lines
from rlcore.controller.health import plan_lines as health_plan_lines
from rlcore.data.image_plan import image_plan
from rlcore.errors import RLCoreError
from rlcore.plugins import PluginManager, load_plugins, run_profiler, step_extensions
from rlcore.presets import PRESETS_FILE, first_line, preset_settings, write_presets
from rlcore.process_env import cpu_threads_setting, quiet_third_party, set_cpu_threads
from rlcore.registry import Component, Registry
from rlcore.run_context import RunContext
from rlcore.run_guard import guarded_fit
from rlcore.usercode import contain_exit

if TYPE_CHECKING:
    from rlcore.api.specs import AdvantageEstimatorSpec, TrainingBackendSpec

BUNDLED_PRESET = "arith-cpu"


def default_presets(files: list[str], overrides: list[str], config_name: str | None = None) -> list[str]:
    """The bundled CPU task's preset when neither a config (file or ``--config-name``) nor ``data.train_files``
    is given."""
    if files or config_name or any(o.lstrip("+").startswith("data.train_files=") for o in overrides):
        return []
    return [BUNDLED_PRESET]


def prepare_presets(manager: PluginManager, presets: list[str], config: DictConfig | None) -> None:
    """Build what the applied presets need before a run (a bundled task's data and warm-started model): a
    preset registered with ``prepare="module:attr"`` has that callable called with the config (``None`` when
    it is prepared outside an RL run: ``rlcore sft``'s bundled task)."""
    import importlib

    for name in presets:
        prepare = manager.registry.spec("preset", name).prepare
        if prepare:
            module, _, attr = str(prepare).partition(":")
            getattr(importlib.import_module(module), attr)(config)


def _component(manager: PluginManager, key: str, kind: str, name: str) -> Component[Any]:
    """Look up one component; the error names the config key (the registry's names the plugin to install, and
    a disabled plugin that provides it is named too)."""
    try:
        return manager.registry.get(kind, name)
    except RLCoreError as exc:
        provider = manager.disabled_provider(kind, name)
        disabled = f"; {provider}" if provider else ""
        raise ConfigError(f"{key}={name}: {exc}{disabled}") from exc


def _check_group_size(config: DictConfig, estimator: Component[AdvantageEstimatorSpec] | None) -> None:
    """``actor_rollout_ref.rollout.n`` is at least the estimator's ``min_group_size`` (None: an unknown
    estimator, reported by the component check)."""
    if estimator is None:
        return
    need = estimator.spec.min_group_size
    n = config.actor_rollout_ref.rollout.n
    if isinstance(n, int) and n < need:
        raise ConfigError(
            f"actor_rollout_ref.rollout.n={n}: algorithm.adv_estimator={estimator.name} compares responses within "
            f"a group and needs at least {need} per prompt"
        )


def _check_sum_pi_squared(
    config: DictConfig,
    estimator: Component[AdvantageEstimatorSpec] | None,
    backend: Component[TrainingBackendSpec] | None,
) -> None:
    """``actor_rollout_ref.actor.calculate_sum_pi_squared`` is on exactly when the estimator reads
    ``sum_pi_squared`` (its ``batch_keys``), the old log-probs are computed by the actor (not taken from the
    rollout by ``bypass_mode``), and the actor's training ``backend`` computes Σπ² (its spec's
    ``sum_pi_squared=True``). Unknown components (None) are reported by the component check."""
    key = "actor_rollout_ref.actor.calculate_sum_pi_squared"
    wanted = bool(config.actor_rollout_ref.actor.calculate_sum_pi_squared)
    if estimator is None:
        return
    reads = "sum_pi_squared" in estimator.spec.batch_keys
    if reads and not wanted:
        raise ConfigError(f"algorithm.adv_estimator={estimator.name} reads the actor's Σπ²: set {key}=true")
    if wanted and not reads:
        raise ConfigError(
            f"{key}=true: algorithm.adv_estimator={estimator.name} does not read Σπ² and rlcore has no other use "
            "for it (verl's variance-proxy metrics are not in rlcore); set it to false"
        )
    if not wanted:
        return
    if config.algorithm.rollout_correction.bypass_mode:
        raise ConfigError(
            f"{key}=true needs the actor's old-log-prob pass, which "
            "algorithm.rollout_correction.bypass_mode=true skips: turn bypass_mode off"
        )
    if backend is not None and not backend.spec.sum_pi_squared:
        raise ConfigError(
            f"{key}=true: the {backend.name!r} training backend does not compute Σπ²; "
            "use actor_rollout_ref.actor.strategy=fsdp or megatron"
        )


def _check_transport(config: DictConfig) -> None:
    """``checkpoint_engine.backend`` other than ``naive`` is refused with a rollout lane (separate_async,
    ``async_training.enable``): the lane moves whole weight snapshots, past any transport."""
    backend = config.actor_rollout_ref.rollout.checkpoint_engine.backend
    plan = async_plan(config)
    if plan is not None and plan.lane and backend != "naive":
        raise ConfigError(
            f"actor_rollout_ref.rollout.checkpoint_engine.backend={backend!r} with {plan.source.split(',')[0]}: the "
            "rollout lane sends whole weight snapshots past the weight transport; use backend=naive"
        )


def _check_ref_strategy(config: DictConfig, registry: Registry) -> None:
    """``actor_rollout_ref.ref.strategy`` names the actor's backend (under any of its names): the reference
    engine lives in the actor's worker processes and cuts batches by the actor's layout, so it cannot run on
    another backend."""
    ref, actor = config.actor_rollout_ref.ref.strategy, config.actor_rollout_ref.actor.strategy
    try:
        same = registry.get("training_backend", ref).name == registry.get("training_backend", actor).name
    except RLCoreError:  # an unknown backend is reported by the component check
        return
    if not same:
        raise ConfigError(
            f"actor_rollout_ref.ref.strategy={ref!r} differs from actor_rollout_ref.actor.strategy={actor!r}: the "
            "reference model runs in the actor's worker processes, sharded by the actor's layout, so rlcore builds "
            f"it with the actor's backend; set actor_rollout_ref.ref.strategy={actor} (or leave it unset)"
        )


def _check_engines(config: DictConfig, registry: Registry, components: RunComponents) -> None:
    """Ask the training backends to reject settings they cannot run (``check_config``), for the actor and,
    when the estimator needs one, the critic — the call the workers make at start-up, made before anything
    starts. This imports the backend (torch); a backend that is not installed is reported by the component
    check instead."""
    from rlcore.registry import UnknownComponentError

    roles = [("actor", "actor_rollout_ref.actor", "actor_rollout_ref.model", config.actor_rollout_ref.actor.strategy)]
    if components.estimator.spec.needs_critic:
        roles.append(("critic", "critic", "critic.model", config.critic.strategy))
    for role, section, model_section, strategy in roles:
        try:
            backend = registry.load("training_backend", strategy)
        except UnknownComponentError:
            continue
        check = getattr(backend, "check_config", None)
        if callable(check):
            check(config, role, section, model_section)


def check_components(
    config: DictConfig, manager: PluginManager, problems: Problems | None = None
) -> RunComponents | None:
    """Resolve every component the config names, once, into the run's :class:`RunComponents`; raise on
    unknown or conflicting ones (all of them, or record them in ``problems`` when it is given, and return
    None when one of the bundle's is unknown).

    Components are resolved without importing them (an advantage estimator's ``min_group_size`` is
    checked against ``rollout.n``); the checks that import them are :func:`check_engines_and_trackers`.
    """
    collected = problems if problems is not None else Problems()
    registry = manager.registry
    actor = config.actor_rollout_ref.actor
    wanted = [
        ("estimator", "algorithm.adv_estimator", "advantage_estimator", config.algorithm.adv_estimator),
        ("policy_loss", "actor_rollout_ref.actor.policy_loss.loss_mode", "policy_loss", actor.policy_loss.loss_mode),
        ("actor_backend", "actor_rollout_ref.actor.strategy", "training_backend", actor.strategy),
        ("rollout_engine", "actor_rollout_ref.rollout.name", "rollout_engine", config.actor_rollout_ref.rollout.name),
        ("reward_manager", "reward_model.reward_manager", "reward_manager", config.reward_model.reward_manager),
        (
            "weight_transport",
            "actor_rollout_ref.rollout.checkpoint_engine.backend",
            "weight_transport",
            config.actor_rollout_ref.rollout.checkpoint_engine.backend,
        ),
    ]
    found: dict[str, Component[Any]] = {}
    for part, key, kind, name in wanted:
        with collected.collect():
            found[part] = _component(manager, key, kind, name)
    filters: list[Component[Any]] = []
    for name in config.algorithm.batch_filters:
        with collected.collect():
            filters.append(_component(manager, "algorithm.batch_filters", "batch_filter", name))
    if not config.data.custom_cls.path:
        with collected.collect():
            _component(manager, "data.dataset", "dataset", config.data.dataset)
    with collected.collect():
        _check_group_size(config, found.get("estimator"))
    with collected.collect():
        _check_sum_pi_squared(config, found.get("estimator"), found.get("actor_backend"))
    with collected.collect():
        _check_ref_strategy(config, registry)
    with collected.collect():
        _check_transport(config)
    for name in _loggers(config):
        with collected.collect():
            _component(manager, "trainer.logger", "tracker", name)
    extensions = None
    with collected.collect():
        extensions = tuple(step_extensions(config, manager))
    if problems is None:
        collected.raise_if_any()
    parts = ("estimator", "policy_loss", "actor_backend", "reward_manager")
    if extensions is None or len(filters) < len(config.algorithm.batch_filters) or any(p not in found for p in parts):
        return None
    return RunComponents(
        estimator=found["estimator"],
        policy_loss=found["policy_loss"],
        actor_backend=found["actor_backend"],
        reward_manager=found["reward_manager"],
        batch_filters=tuple(filters),
        extensions=extensions,
        weight_transport=found.get("weight_transport"),
    )


def check_engines_and_trackers(
    config: DictConfig, registry: Registry, components: RunComponents, problems: Problems
) -> None:
    """The checks that import what the config names, recorded in ``problems``: the training backends'
    ``check_config`` (:func:`_check_engines`) and the trackers' libraries and settings
    (:func:`~rlcore.tracking.external.preflight_trackers`), so that a tracker whose package is missing fails
    here, naming its ``pip install 'rlcore[...]'`` line, before any model loads. They import torch or a
    tracker's library (seconds), so ``rlcore run`` makes them last, on a config with nothing else wrong: a
    mistake such as an unknown key is reported at once."""
    from rlcore.tracking.external import preflight_trackers

    with problems.collect():
        _check_engines(config, registry, components)
    with problems.collect():
        preflight_trackers(config, registry)


def run_plan_lines(config: DictConfig) -> list[str]:
    """The plan's line for the custom training sampler; importing the sampler class here makes a bad
    ``data.sampler`` fail the dry run (the sampler module needs torch: imported only then). The rollout
    engine's lines (rlcore-plugin-hf: chunks, R3), the sandbox's (rlcore-plugin-sandbox) and the profiler's
    (rlcore-plugin-profiler) come from their plugins' ``plan_lines`` hooks."""
    lines = [line for line in [rollout_pool_plan_line(config), async_plan_line(config)] if line] + noted_plan_lines(
        config
    )
    sampler = SamplerConfig.from_tree(config, "data.sampler")
    if not sampler.class_path:
        return lines
    from rlcore.data.sampler import describe_sampler

    return lines + [line for line in [describe_sampler(sampler)] if line]


def _loggers(config: DictConfig) -> list[str]:
    logger = config.trainer.logger
    return [logger] if isinstance(logger, str) else list(logger)


def _require(config: DictConfig, key: str, hint: str) -> None:
    from omegaconf import OmegaConf

    if OmegaConf.select(config, key) in (None, ""):
        raise ConfigError(f"{key} is not set: {hint}")


def make_run_dir(config: DictConfig) -> Path:
    """``trainer.runs_dir/<project>/<experiment>-<timestamp>``, created; an error names ``trainer.runs_dir``
    when it cannot be."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(config.trainer.runs_dir) / config.trainer.project_name
    run_dir = base / f"{config.trainer.experiment_name}-{stamp}"
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = base / f"{config.trainer.experiment_name}-{stamp}-{suffix}"
    try:
        run_dir.mkdir(parents=True)
    except OSError as exc:
        raise RLCoreError(
            f"trainer.runs_dir={config.trainer.runs_dir}: cannot create the run directory {run_dir} "
            f"({exc.strerror or exc}); choose a writable folder"
        ) from exc
    check_writable(run_dir, "trainer.runs_dir")
    return run_dir


def check_writable(folder: Path, key: str) -> None:
    """Create ``folder`` if needed and write, flush and delete a small file in it; an error names ``key``."""
    probe = folder / f".rlcore-write-test-{uuid.uuid4().hex[:8]}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with probe.open("wb") as handle:
            handle.write(b"\0" * 4096)
            handle.flush()
            os.fsync(handle.fileno())
        probe.unlink()
    except OSError as exc:
        probe.unlink(missing_ok=True)
        raise RLCoreError(f"{key}={folder} is not writable ({exc.strerror or exc}); choose a writable folder") from exc


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_training(
    files: list[str],
    overrides: list[str],
    presets: list[str],
    *,
    dry_run: bool = False,
    config_name: str | None = None,
    config_path: str | None = None,
) -> dict[str, Any]:
    """Everything ``rlcore run`` does; returns the last metrics (empty for a dry run).

    Every problem the config has (unknown keys, bad values, unknown components, batch arithmetic) is
    reported at once, before anything starts.
    """
    start = time.perf_counter()
    manager = load_plugins()
    for record in manager.problems():
        click.echo(f"warning: plugin {record.name} [{record.status}]: {record.error}", err=True)
    registry = manager.registry
    task_given = any(registry.has("preset", p) and registry.spec("preset", p).prepare for p in presets)
    presets = ([] if task_given else default_presets(files, overrides, config_name)) + presets
    announce = first_line(presets, bundled=BUNDLED_PRESET in presets)
    if announce:
        click.echo(announce)
    problems = Problems()
    config = load_config(
        files, overrides, presets, manager, config_name=config_name, config_path=config_path, problems=problems
    )
    with problems.collect(), contain_exit("a plugin's on_config_resolved hook"):
        manager.hook.on_config_resolved(config=config)
    with problems.collect():
        _require(config, "data.train_files", "pass data.train_files=PATH (parquet or jsonl) or a config file")
    with problems.collect():
        _require(config, "actor_rollout_ref.model.path", "pass actor_rollout_ref.model.path=NAME_OR_DIR")
    quiet_third_party(str(config.trainer.device))
    components = check_components(config, manager, problems)
    with problems.collect():
        check_values(config)
    with problems.collect():
        check_checkpoint_callback(config.trainer.checkpoint_callback_class)
    with problems.collect():
        run_multi_turn(config, registry, manager).check()
    cpu_threads = None
    with problems.collect():
        cpu_threads = cpu_threads_setting(config)
    plan_lines: list[str] = []
    with problems.collect():
        plan_lines += run_plan_lines(config)
    with problems.collect():
        plan_lines += health_plan_lines(config, registry)
    with problems.collect():
        plan_lines += lane_plan_lines(config)
    with problems.collect():
        run_profiler(config, manager)  # profiling asked for with no plugin to do it: refused here
    with problems.collect():
        check_allowed(config.trainer.resume_allow_changes)
    with problems.collect():
        derived = derive_quantities(config)
    images = None
    with problems.collect():
        images = image_plan(config, registry)
    if components is not None and not problems.items:
        check_engines_and_trackers(config, registry, components, problems)
    with problems.collect(), contain_exit("a plugin's plan_lines hook"):
        for lines in manager.hook.plan_lines(config=config, dry_run=dry_run and not problems.items):
            plan_lines += lines or []
    problems.raise_if_any()
    assert components is not None, "check_components records a problem for every component it cannot resolve"
    versions = manager.versions()
    click.echo(plugins_line(versions))
    click.echo(derived.summary())
    for line in plan_lines:
        click.echo(line)
    if images:
        click.echo(images)
    if dry_run:
        click.echo(config_to_yaml(config), nl=False)
        return {}
    make_output_paths_absolute(config)
    trainer = TrainerConfig.from_tree(config)
    set_cpu_threads(cpu_threads)
    prepare_presets(manager, presets, config)
    from rlcore.model_check import check_model_paths

    check_model_paths(config)
    if saves_checkpoints(trainer):
        check_writable(Path(config.trainer.default_local_dir), "trainer.default_local_dir")
    for key in ("rollout_data_dir", "validation_data_dir"):
        if config.trainer.get(key):
            check_writable(Path(config.trainer[key]), f"trainer.{key}")

    # the run directory is made once start-up has succeeded (the folder locked, the resume chosen, the data
    # read): a start-up error leaves nothing behind
    run = RunContext(config=config, run_dir=Path(), plugins=versions, derived=derived.as_dict())

    def open_run_dir() -> None:
        """Make the run directory and write what the run starts from: its config, plugins, batch arithmetic
        and presets."""
        run.run_dir = make_run_dir(config)
        (run.run_dir / "config.yaml").write_text(config_to_yaml(config))
        (run.run_dir / "plugins.json").write_text(
            json.dumps(
                {
                    r.name: {"version": r.version, "status": r.status, "builtin": r.builtin}
                    for r in manager.records.values()
                },
                indent=2,
            )
        )
        run.save_derived()
        write_presets(run.run_dir, preset_settings(config, presets, manager))
        click.echo(f"run directory: {shown_path(run.run_dir)}")

    return guarded_fit(
        config,
        run,
        manager,
        components,
        open_run_dir=open_run_dir,
        summarise=lambda last, status: _summarise(trainer, run, manager, last, time.perf_counter() - start, status),
        print_kept=lambda abandoned: print_kept(trainer, run.run_dir, abandoned=abandoned),
    )


def plugins_line(versions: dict[str, str | None]) -> str:
    """``plugins: N installed (rlcore plugins lists them)``; the versions are in the run's ``plugins.json``."""
    if not versions:
        return "plugins: none installed (only rlcore's built-in components)"
    return f"plugins: {len(versions)} installed (rlcore plugins lists them)"


def print_kept(trainer: TrainerConfig, run_dir: Path, *, abandoned: bool) -> None:
    """After a stop signal: say whether the step in progress was finished, the last step logged in the run's
    ``metrics.jsonl`` (a step abandoned while its checkpoint was saved was logged already) and the newest
    checkpoint (in the ``trainer`` section's ``default_local_dir``)."""
    from rlcore.checkpoint import CheckpointManager
    from rlcore.tracking.sinks import read_metrics

    metrics = run_dir / "metrics.jsonl"
    try:
        step = max((int(row["step"]) for row in read_metrics(metrics)), default=0)
    except RLCoreError:  # no step logged, or a damaged file: the summary names it
        step = 0
    latest = CheckpointManager(trainer).latest() if trainer.default_local_dir else None
    how = "the step in progress was abandoned" if abandoned else "the step in progress was finished"
    click.echo(
        f"stopped: {how}; steps up to {step} are logged in {shown_path(metrics)}; "
        f"newest checkpoint: {shown_path(latest) if latest else 'none'}"
    )


def kept_lines(trainer: TrainerConfig, run: RunContext, status: str) -> list[str]:
    """The summary's lines naming what a run leaves to use: the trained model (``trainer.save_final_model``)
    and, unless a stop signal interrupted it (the ``stopped:`` line names it then), the newest checkpoint
    (``trainer.save_freq``)."""
    from rlcore.checkpoint import CheckpointManager

    lines = []
    if (run.final_model / "config.json").is_file():
        lines.append(f"model:         {shown_path(run.final_model)} (Hugging Face format)")
    if saves_checkpoints(trainer) and not status.startswith("interrupted"):
        latest = CheckpointManager(trainer).latest()
        lines.append(f"checkpoint:    {shown_path(latest) if latest else 'none saved'}")
    return lines


def print_summary_lines(manager: PluginManager, run_dir: Path, status: str) -> None:
    """Print the plugins' lines at the end of a run's summary (the ``summary_lines`` hook: the report of
    rlcore-plugin-report, for one), once ``summary.json`` is written and a step was logged."""
    with contain_exit("a plugin's summary_lines hook"):
        for lines in manager.hook.summary_lines(run_dir=run_dir, status=status):
            for line in lines or []:
                click.echo(line)


def _summarise(
    trainer: TrainerConfig, run: RunContext, manager: PluginManager, last: dict[str, Any], wall: float, status: str
) -> None:
    """Print the validation trend, write ``summary.json`` (with the run's ``status``); name the trained model
    and the newest checkpoint (:func:`kept_lines`), the metrics and what the plugins made of the run
    (:func:`print_summary_lines`: the report and ``reward_curve.png`` of rlcore-plugin-report). Raises
    :class:`RLCoreError` when ``summary.json`` itself cannot be written."""
    from rlcore.tracking.sinks import read_metrics

    run_dir = run.run_dir
    metrics_path = run_dir / "metrics.jsonl"
    rows = read_metrics(metrics_path) if metrics_path.is_file() else []  # no step logged (stopped early)
    val_keys = sorted({k for row in rows for k in row if k.startswith("val-core/")})
    click.echo("")
    for key in val_keys:
        points = [(row["step"], row[key]) for row in rows if row.get(key) is not None]
        if points:
            first, final = points[0], points[-1]
            click.echo(f"{key}: {first[1]:.3f} (step {first[0]}) -> {final[1]:.3f} (step {final[0]})")
    presets = [entry["name"] for entry in json.loads((run_dir / PRESETS_FILE).read_text())]
    summary = {
        "status": status,
        "presets": presets,
        "wall_time_s": round(wall, 1),
        "peak_rss_mb": round(_peak_rss_mb(), 1),
        "health": run.health,
    }
    try:
        (run_dir / "summary.json").write_text(json.dumps({**summary, "last": last}, indent=2, default=float))
    except OSError as exc:
        raise RLCoreError(
            f"cannot write {shown_path(run_dir / 'summary.json')} ({exc.strerror or exc}); the run's metrics are in "
            f"{shown_path(metrics_path)}"
        ) from exc
    click.echo(f"wall time: {summary['wall_time_s']} s, peak memory (RSS): {summary['peak_rss_mb']} MB")
    click.echo(f"run directory: {shown_path(run_dir)}")
    for line in kept_lines(trainer, run, status):
        click.echo(line)
    for line in health_lines(run.health):
        click.echo(line)
    if not rows:  # nothing to plot: no step was logged
        sys.stdout.flush()
        return
    click.echo(f"metrics:       {shown_path(metrics_path)}")
    print_summary_lines(manager, run_dir, status)
    sys.stdout.flush()
