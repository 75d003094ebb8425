"""The plugin's commands: ``rlcore sft`` and ``rlcore data arith-sft`` (added by :func:`add_commands`).

Only click is imported here; each command imports what it runs when it is invoked, so ``rlcore --help``
stays fast.
"""

from __future__ import annotations

import click

from rlcore.api import RLCoreError


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--dry-run", is_flag=True, help="Resolve and check the config, print the plan, start nothing.")
def sft(args: tuple[str, ...], dry_run: bool) -> None:
    """Supervised fine-tuning: rlcore sft [CONFIG.yaml ...] [key=value ...] (verl's SFT keys, docs/sft.md).

    Without arguments: the bundled arithmetic task. The checkpoint's ``actor/huggingface`` folder is what
    ``rlcore run actor_rollout_ref.model.path=...`` takes.
    """
    from rlcore.api import parse_command_line
    from rlcore_plugin_sft.run import run_sft

    line = parse_command_line(args)
    if line.config_name or line.config_path:
        raise RLCoreError("rlcore sft takes config files as arguments; --config-path/--config-name are not supported")
    run_sft(line.files, line.overrides, dry_run=dry_run)


@click.command("arith-sft")
@click.option("--local-dir", default="~/data/arith-sft", show_default=True, help="Where to write the parquet files.")
def data_arith_sft(local_dir: str) -> None:
    """Write the bundled arithmetic task's prompts with their correct answers (prompt/response columns) as
    sft-train.parquet / sft-val.parquet (builds the task's cached assets first)."""
    import os
    from pathlib import Path

    from rlcore import load_plugins
    from rlcore.api import RunKit
    from rlcore_plugin_sft.arith import prepare_sft_assets, write_sft_data

    root = prepare_sft_assets(RunKit(load_plugins()))
    for split, path in write_sft_data(root, Path(os.path.expanduser(local_dir))).items():
        click.echo(f"{split}: {path}")


def add_commands(cli: click.Group) -> None:
    """Add ``sft`` to the ``rlcore`` group ``cli`` and ``arith-sft`` to its ``data`` group."""
    cli.add_command(sft)
    data = cli.commands.get("data")
    if not isinstance(data, click.Group):
        raise RLCoreError("the rlcore command line has no `data` group to add `arith-sft` to")
    data.add_command(data_arith_sft)
