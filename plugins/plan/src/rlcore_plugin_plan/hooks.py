"""The plugin's hooks: the ``rlcore plan`` command and the dry run's plan lines.

This module must stay free of torch and transformers imports: ``rlcore plugins`` and config loading import it.
"""

from __future__ import annotations

import json

import click
from omegaconf import DictConfig

from rlcore import hookimpl

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_commands(cli: click.Group) -> None:
    """Add ``rlcore plan [--preset NAME] [--gpu DEVICE] [--json] [ARGS]``."""

    @cli.command(context_settings={"ignore_unknown_options": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    @click.option("--preset", "presets", multiple=True, help="Apply a registered preset before files and overrides.")
    @click.option(
        "--gpu",
        "gpu",
        default=None,
        help="Device to plan for: h100, h200, a100, l40s or cpu [default: this machine's GPU, else cpu].",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
    def plan(args: tuple[str, ...], presets: tuple[str, ...], gpu: str | None, as_json: bool) -> None:
        """Per-rank peak memory of each phase, the step time and whether it fits, for the config ``rlcore run``
        would use (same arguments), before launching anything (docs/plan.md)."""
        from rlcore.api import resolved_config
        from rlcore_plugin_plan.planner import plan_for_config
        from rlcore_plugin_plan.render import render_text

        result = plan_for_config(resolved_config(args, presets), gpu)
        click.echo(json.dumps(result.as_dict(), indent=2) if as_json else render_text(result))


@hookimpl(trylast=True)  # the plan sums up the run: after the other plugins' lines
def plan_lines(config: DictConfig, dry_run: bool) -> list[str] | None:
    """The short plan (peaks per phase, step time, verdict) for ``rlcore run --dry-run``; nothing for a real run."""
    if not dry_run:
        return None
    from rlcore_plugin_plan.render import dry_run_lines

    return dry_run_lines(config)
