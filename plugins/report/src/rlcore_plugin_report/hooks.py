"""The plugin's hooks: its config key (``trainer.report``), the ``rlcore report`` command and the report at the end
of every run.

This module must stay free of matplotlib imports: ``rlcore plugins`` and the command line import it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from rlcore import hookimpl

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def config_defaults() -> Any:
    """Declare ``trainer.report`` (:class:`~rlcore_plugin_report.config.ReportConfig`): false skips the report at
    the end of ``rlcore run``."""
    from rlcore_plugin_report.config import ReportConfig

    return ReportConfig()


@hookimpl
def register_commands(cli: click.Group) -> None:
    """Add ``rlcore report RUN_DIR [RUN_DIR ...] [--out DIR]``."""

    @cli.command()
    @click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False))
    @click.option(
        "--out",
        "out_dir",
        type=click.Path(file_okay=False),
        help="Output folder [default: RUN_DIR/report for one run, ./rlcore-report for several].",
    )
    def report(run_dirs: tuple[str, ...], out_dir: str | None) -> None:
        """Plot one or more runs and write an HTML summary: rlcore report RUN_DIR [RUN_DIR ...] [--out DIR]."""
        from rlcore_plugin_report.report import write_report

        result = write_report(list(run_dirs), out_dir)
        missing = [slug for slug, has in result.has_data.items() if not has]
        click.echo(f"report: {result.html}")
        click.echo(f"plots:  {result.png} (+ {len(result.panels)} panels in {result.png.parent / 'panels'})")
        if missing:
            click.echo(f"no data for: {', '.join(missing)}")


@hookimpl
def summary_lines(run_dir: Path) -> list[str]:
    """Write the run's report (and an RL run's ``reward_curve.png``) and name them at the end of its summary, or
    say how to draw them later when the run's config says ``trainer.report: false``."""
    from rlcore_plugin_report.summary import end_of_run_lines

    return end_of_run_lines(run_dir)
