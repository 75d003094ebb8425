"""The plugin's commands: the ``rlcore new`` group and its ``new plugin`` command (added by the hooks).

Only click is imported here; cookiecutter is imported when ``rlcore new plugin`` runs, so ``rlcore --help``
stays fast.
"""

from __future__ import annotations

from pathlib import Path

import click


@click.group()
def new() -> None:
    """Scaffold new projects from rlcore's templates."""


@new.command("plugin")
@click.argument("values", nargs=-1)
@click.option("--no-input", is_flag=True, help="Do not prompt: use the defaults and the key=value arguments.")
@click.option(
    "--output-dir",
    "-o",
    type=click.Path(file_okay=False),
    default=".",
    show_default=True,
    help="Where to create the project directory.",
)
def new_plugin(values: tuple[str, ...], no_input: bool, output_dir: str) -> None:
    """Create a plugin distribution, rlcore-plugin-NAME, from rlcore's template.

    VALUES are template variables as key=value, e.g. plugin_name=myalgo policy_loss=yes (docs/publishing.md
    lists them); the others are asked for, or take their defaults with --no-input.
    """
    from rlcore_plugin_scaffold.scaffold import new_plugin as render
    from rlcore_plugin_scaffold.scaffold import next_steps, parse_assignments, template_variables

    project = render(parse_assignments(values, template_variables()), no_input=no_input, output_dir=Path(output_dir))
    click.echo(f"Created {project.name} in {project.parent}. Next:")
    for command in next_steps(project, Path.cwd()):
        click.echo(f"  {command}")
