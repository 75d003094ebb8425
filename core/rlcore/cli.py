"""The ``rlcore`` command line.

Start-up imports click and the plugin loader only; torch, transformers and every component target are
imported inside the commands that need them, so ``rlcore --help`` and ``rlcore plugins`` stay fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from rlcore import __version__
from rlcore.api.kinds import KINDS
from rlcore.errors import RLCoreError
from rlcore.plugins import PROBLEM_STATUSES, PluginManager, load_plugins, slow_plugin_warning, undeclared_api_warning


class RLCoreGroup(click.Group):
    """A click group that prints :class:`RLCoreError` as one clear line instead of a traceback, and names the
    distribution to install for a sub-command a plugin distribution adds (``rlcore sft``)."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        """Click's lookup; an unknown sub-command that a known distribution adds fails naming it."""
        name = args[0] if args else None
        if name and not ctx.resilient_parsing and self.get_command(ctx, name) is None:
            from rlcore.distributions import missing_command_advice

            advice = missing_command_advice(" ".join([*ctx.command_path.split()[1:], name]))
            if advice is not None:
                ctx.fail(f"No such command {name!r}: {advice}.")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command, turning user errors into ``error: ...`` and exit status 2."""
        try:
            return super().invoke(ctx)
        except RLCoreError as exc:
            problems = getattr(exc, "problems", None) or [str(exc)]
            for problem in problems:
                click.echo(f"error: {problem}", err=True)
            if len(problems) > 1:
                click.echo(f"{len(problems)} problems found; nothing was started", err=True)
            sys.exit(2)


@click.group(cls=RLCoreGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rlcore")
def cli() -> None:
    """rlcore: RL post-training for LLMs — a single-controller core plus installable plugins."""


# ------------------------------------------------------------------ plugins
def _plugin_rows(manager: PluginManager, show_all: bool, kind: str | None) -> list[dict[str, Any]]:
    rows = []
    for record in manager.records.values():
        if record.builtin and not show_all:
            continue
        comps = manager.components_of(record.name)
        if kind is not None:
            comps = [c for c in comps if c.kind == kind]
            if not comps:
                continue
        rows.append(
            {
                "name": record.name,
                "version": record.version,
                "status": record.status,
                "api": record.api_range,
                "builtin": record.builtin,
                "hooks": record.hooks,
                "components": [
                    {
                        "kind": c.kind,
                        "name": c.name,
                        "target": c.target_path,
                        "description": c.description,
                        "aliases": list(c.aliases),
                        **({"replaces": c.replaced} if c.replaced else {}),
                    }
                    for c in comps
                ],
                "error": record.error,
                **({"traceback": record.traceback} if record.traceback else {}),
                "load_seconds": record.load_seconds,
            }
        )
    return rows


def _format_table(rows: list[dict[str, Any]], verbose: bool) -> str:
    """The plugin table; ``verbose`` adds each plugin's load time (LOAD: import + registration hooks) and the
    tracebacks of failed plugins."""
    headers = ("PLUGIN", "VERSION", "STATUS", *(("LOAD",) if verbose else ()), "COMPONENTS")
    body = []
    for row in rows:
        if row["status"] in PROBLEM_STATUSES:
            detail = row["error"] + ("" if verbose else " (--verbose for details)")
        elif row["status"] == "disabled":
            detail = "(disabled by RLCORE_LOAD_PLUGINS / RLCORE_DISABLE_PLUGINS)"
        else:
            detail = ", ".join(f"{c['kind']}:{c['name']}" for c in row["components"]) or "-"
        seconds = row["load_seconds"]
        load = (("-" if seconds is None else f"{seconds:.2f}s"),) if verbose else ()
        body.append((row["name"], row["version"] or "-", row["status"], *load, detail))
    columns = len(headers) - 1
    widths = [max(len(str(r[i])) for r in [headers, *body]) for i in range(columns)]
    lines = [
        "  ".join(str(v).ljust(w) for v, w in zip(r[:columns], widths)) + "  " + r[columns] for r in [headers, *body]
    ]
    if verbose:
        for row in rows:
            if row.get("traceback"):
                lines += ["", f"--- {row['name']} ---", row["traceback"].rstrip()]
    return "\n".join(lines)


@cli.command()
@click.option("--all", "show_all", is_flag=True, help="Include the built-in plugins.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--kind", type=click.Choice(KINDS), help="Only plugins providing this component kind.")
@click.option(
    "--verbose", is_flag=True, help="Show each plugin's load time and the tracebacks of plugins that failed to load."
)
@click.option("--strict", is_flag=True, help="Exit with status 1 when any plugin failed, conflicts or is incompatible.")
@click.option("--requirements", is_flag=True, help="Print name==version lines of the external plugins.")
def plugins(show_all: bool, as_json: bool, kind: str | None, verbose: bool, strict: bool, requirements: bool) -> None:
    """List installed plugins, their status and the components they provide."""
    manager = load_plugins()
    for record in manager.undeclared_api():
        click.echo(undeclared_api_warning(record), err=True)
    rows = _plugin_rows(manager, show_all, kind)
    if requirements:
        click.echo("\n".join(f"{r['name']}=={r['version']}" for r in rows if not r["builtin"] and r["version"]))
    elif as_json:
        if not verbose:
            for row in rows:
                row.pop("traceback", None)
                row.pop("load_seconds", None)
        click.echo(json.dumps(rows, indent=2))
    else:
        click.echo(_format_table(rows, verbose) if rows else "no plugins installed (use --all to see the built-ins)")
    if strict and manager.problems():
        sys.exit(1)


# ------------------------------------------------------------------- config
@cli.group()
def config() -> None:
    """Inspect the run configuration."""


def resolved_config(args: tuple[str, ...], presets: tuple[str, ...]) -> Any:
    """The config ``rlcore run ARGS`` would use, with the ``--preset`` names ``presets`` (plugins'
    ``on_config_resolved`` hooks included): what ``rlcore config show`` prints and ``rlcore plan``
    (rlcore-plugin-plan) plans."""
    from rlcore.config import load_config, parse_command_line
    from rlcore.run import default_presets

    line = parse_command_line(args)
    manager = load_plugins()
    cfg = load_config(
        line.files,
        line.overrides,
        default_presets(line.files, line.overrides, line.config_name) + list(presets),
        manager,
        config_name=line.config_name,
        config_path=line.config_path,
    )
    manager.hook.on_config_resolved(config=cfg)
    return cfg


@config.command("show", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--preset", "presets", multiple=True, help="Apply a registered preset (repeatable).")
def config_show(args: tuple[str, ...], presets: tuple[str, ...]) -> None:
    """Print the resolved config for [--config-path DIR --config-name NAME] [CONFIG.yaml ...] [key=value ...].

    It is the config ``rlcore run`` would use (plugins' ``on_config_resolved`` hooks included). A key that
    also accepts verl's spelling is marked ``# verl: <spelling>``.
    """
    from rlcore.config import config_to_yaml
    from rlcore.config.aliases import with_alias_comments

    click.echo(with_alias_comments(config_to_yaml(resolved_config(args, presets))), nl=False)


# ---------------------------------------------------------------------- run
@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--preset", "presets", multiple=True, help="Apply a registered preset before files and overrides.")
@click.option("--dry-run", is_flag=True, help="Resolve and check the config, print the plan, start nothing.")
def run(args: tuple[str, ...], presets: tuple[str, ...], dry_run: bool) -> None:
    """Train: rlcore run [--config-path DIR --config-name NAME] [CONFIG.yaml ...] [key=value ...].

    Without arguments: the bundled CPU task. A verl command line works with ``python3 -m
    verl.trainer.main_ppo`` replaced by ``rlcore run`` (see docs/from-verl.md).
    """
    from rlcore.config import parse_command_line
    from rlcore.run import run_training

    line = parse_command_line(args)
    run_training(
        line.files,
        line.overrides,
        list(presets),
        dry_run=dry_run,
        config_name=line.config_name,
        config_path=line.config_path,
    )


# ------------------------------------------------------------------- health
@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.argument("overrides", nargs=-1, type=click.UNPROCESSED)
def health(run_dir: Path, overrides: tuple[str, ...]) -> None:
    """Check a finished or running run: rlcore health RUN_DIR [key=value ...].

    Replays RUN_DIR/metrics.jsonl through the run-health monitors with the run's config.yaml settings
    (trainer.monitors.*) and the overrides, and prints the findings. Exit status 0: none; 1: some.
    """
    from rlcore.health_command import replay

    if replay(run_dir, list(overrides), load_plugins()):
        sys.exit(1)


# --------------------------------------------------------------------- data
@cli.group(cls=RLCoreGroup)
def data() -> None:
    """Prepare datasets in verl's parquet format."""


def main() -> None:
    """Console-script entry point: load plugins (naming any that is slow to load), let them add commands, run
    the CLI."""
    try:
        manager = load_plugins()
        slow = manager.slow_plugins()
    except RLCoreError as exc:  # strict mode: a broken plugin is fatal, but still no traceback
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    for record in slow:
        click.echo(slow_plugin_warning(record), err=True)
    manager.add_commands(cli)
    cli(prog_name="rlcore")
