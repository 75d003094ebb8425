"""The plugin's hooks: adds ``rlcore new plugin`` to the command line.

This module must stay free of cookiecutter imports: ``rlcore plugins`` and the command line's start-up import it.
"""

from __future__ import annotations

import click

from rlcore import hookimpl

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_commands(cli: click.Group) -> None:
    """Add the ``new`` group with its ``plugin`` command (``rlcore new plugin [KEY=VALUE ...]``)."""
    from rlcore_plugin_scaffold.commands import new

    cli.add_command(new)
