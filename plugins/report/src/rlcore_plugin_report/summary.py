"""The end of a run's summary (``rlcore run`` and ``rlcore sft``): the run's report (``report/``) and, for an RL
run, ``reward_curve.png`` are written into its directory and named on the console (unless its config says
``trainer.report: false``)."""

from __future__ import annotations

from pathlib import Path

import yaml

from rlcore.api import METRICS_FILE, RLCoreError, shown_path
from rlcore_plugin_report.config import ReportConfig
from rlcore_plugin_report.plot import plot_reward_curve
from rlcore_plugin_report.report import _read_json, write_report

#: the reward curve an RL run leaves in its directory
REWARD_CURVE = "reward_curve.png"


def end_of_run_lines(run_dir: Path) -> list[str]:
    """Write the report of the run in ``run_dir`` (and an RL run's reward curve) and return the summary's lines
    naming them. An SFT run (its ``summary.json`` says ``kind: sft``) gets the report only, named without its
    plots. A report or curve that cannot be written (a full disk, matplotlib missing) is one line saying why: the
    run has finished by then, and its end must not fail on a plot."""
    if not report_wanted(run_dir):
        return [f"report:        not drawn (trainer.report: false); rlcore report {shown_path(run_dir)} draws it"]
    sft = _read_json(run_dir / "summary.json").get("kind") == "sft"
    lines = []
    try:
        report = write_report([run_dir])
        plots = "" if sft else f" (plots: {shown_path(report.png)})"
        lines.append(f"report:        {shown_path(report.html)}{plots}")
    except RLCoreError as exc:
        lines.append(f"report:        not written: {exc}")
    except ImportError as exc:
        lines.append(f"report:        not written: {not_installed(exc)}")
    if sft:
        return lines
    curve = run_dir / REWARD_CURVE
    try:
        lines.append(f"reward curve:  {shown_path(plot_reward_curve(run_dir / METRICS_FILE, curve))}")
    except RLCoreError as exc:
        lines.append(f"reward curve:  not drawn: {exc}")
    except ImportError as exc:
        lines.append(f"reward curve:  not drawn: {not_installed(exc)}")
    except OSError as exc:  # e.g. the disk is full
        lines.append(f"reward curve:  not drawn: cannot write {shown_path(curve)} ({exc.strerror or exc})")
    return lines


def report_wanted(run_dir: Path) -> bool:
    """Whether the run's ``config.yaml`` leaves ``trainer.report`` on (:class:`ReportConfig`; so does a run
    without the file or the key, such as an ``rlcore sft`` run)."""
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return True
    trainer = config.get("trainer") if isinstance(config, dict) else None
    return ReportConfig.from_mapping(trainer).report if isinstance(trainer, dict) else True


def not_installed(exc: ImportError) -> str:
    """Why a plot was not made when its plotting library does not import, with the command that fixes it."""
    name = (exc.name or "matplotlib").split(".")[0]
    return f"{name} is not installed here ({exc}); pip install {name} (rlcore-plugin-report depends on it)"
