"""The plugin's hooks: adds ``rlcore sft`` and ``rlcore data arith-sft`` to the command line.

This module must stay free of torch imports: ``rlcore plugins`` and the command line's start-up import it.
"""

from __future__ import annotations

import click

from rlcore import hookimpl

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_commands(cli: click.Group) -> None:
    """Add ``sft`` (supervised fine-tuning) and ``data arith-sft`` (the bundled SFT data)."""
    from rlcore_plugin_sft.commands import add_commands

    add_commands(cli)
