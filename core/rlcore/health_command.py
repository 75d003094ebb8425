"""``rlcore health RUN_DIR``: replay a finished or running run through the run-health monitors.

The run's ``metrics.jsonl`` is fed to the monitors one row at a time, as the run fed them
(:class:`rlcore.controller.health.Monitors`: the validation before training, step 0, joins the history
unchecked), with the monitors' settings of the run's ``config.yaml`` (its ``trainer.monitors`` section; the
current defaults without one) and the ``key=value`` overrides given after the directory. A monitor that
asks for samples gets the step's dumped generations when the run wrote them (``trainer.rollout_data_dir``).
The findings are printed as the run prints them, then the signals a monitor reads (its spec's ``reads``) that
the run never logged; the exit status is 0 without findings, 1 with any.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import yaml

from rlcore.api.health import ResponseSample
from rlcore.config.sections.monitors import MONITORS_KEY
from rlcore.errors import RLCoreError
from rlcore.tracking.sinks import METRICS_FILE, read_metrics

if TYPE_CHECKING:
    from rlcore.plugins import PluginManager


def _run_monitor_sections(run_dir: Path, installed: set[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's ``config.yaml`` (empty when there is none) and its ``trainer.monitors`` sections of the
    installed monitors."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        return {}, {}
    try:
        saved = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise RLCoreError(f"{path}: not a YAML config ({exc})".replace("\n", " ")) from exc
    sections = (saved.get("trainer") or {}).get("monitors") or {}
    return saved, {name: values for name, values in sections.items() if name in installed}


def _dumped_samples(folder: Path | None, step: int, wanted: int) -> list[ResponseSample]:
    """``wanted`` rows, spread over the step's dump ``<folder>/<step>.jsonl`` (``trainer.rollout_data_dir``),
    as samples; none without the dump. A dump holds text, not tokens: ``response_length`` is -1."""
    path = folder / f"{step}.jsonl" if folder is not None else None
    if wanted == 0 or path is None or not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows:
        return []
    picked = [rows[round(i * (len(rows) - 1) / max(wanted - 1, 1))] for i in range(min(wanted, len(rows)))]
    fixed = {"input", "output", "gts", "score", "step"}
    return [
        ResponseSample(
            prompt=str(row.get("input", "")),
            response=str(row.get("output", "")),
            score=float(row.get("score") or 0.0),
            response_length=-1,
            extra={k: float(v) for k, v in row.items() if k not in fixed and isinstance(v, int | float)},
        )
        for row in picked
    ]


def replay(run_dir: Path, overrides: list[str], manager: PluginManager) -> int:
    """Replay ``run_dir`` (see the module docstring) through the monitors of ``manager``'s plugins, print the
    findings; the number of findings."""
    from rlcore.config import ConfigError, load_config
    from rlcore.controller.health import Monitors, finding_line

    metrics_path = run_dir if run_dir.is_file() else run_dir / METRICS_FILE
    run_dir = metrics_path.parent
    rows = read_metrics(metrics_path)  # a missing or broken file: one line naming it
    saved, sections = _run_monitor_sections(run_dir, set(manager.registry.names("health_monitor")))
    with tempfile.TemporaryDirectory() as folder:
        section_file = Path(folder) / "monitors.yaml"
        section_file.write_text(yaml.safe_dump({"trainer": {"monitors": sections}}))
        try:
            config = load_config([str(section_file)] if sections else [], overrides, [], manager)
        except ConfigError as exc:  # a key of the run's section that these monitors do not declare: name the run's file
            saved_file = f"{run_dir / 'config.yaml'} (its trainer.monitors section)"
            raise ConfigError(*(problem.replace(str(section_file), saved_file) for problem in exc.problems)) from exc
    monitors = Monitors.build(config, manager.registry)
    if not monitors.running:
        click.echo(f"no run-health monitor is enabled ({MONITORS_KEY}.<name>.enable; pip install rlcore-plugin-health)")
        return 0
    dumps = (saved.get("trainer") or {}).get("rollout_data_dir")
    dump_folder = Path(dumps) if dumps else None
    count = 0
    steps = 0
    for row in sorted(rows, key=lambda r: int(r.get("step", 0))):
        step = int(row.get("step", 0))
        if step < 1:
            monitors.record(step, row)
            continue
        steps += 1
        for _, findings in monitors.check(step, row, _dumped_samples(dump_folder, step, monitors.samples)):
            for finding in findings:
                count += 1
                click.echo(f"{finding_line(finding)} (step {finding.step})")
    for line in monitors.unread():
        click.echo(line)
    names = ", ".join(r.name for r in monitors.running)
    verdict = f"{count} finding{'s' if count != 1 else ''}" if count else "no findings"
    click.echo(f"{verdict} in {metrics_path} ({steps} step{'s' if steps != 1 else ''}; monitors: {names})")
    return count
