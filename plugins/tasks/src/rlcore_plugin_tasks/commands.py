"""The plugin's commands: ``rlcore data gsm8k`` and ``rlcore data geo3k`` (added by :func:`add_commands`).

Only click is imported here; each command imports what it runs when it is invoked, so ``rlcore --help``
stays fast.
"""

from __future__ import annotations

import click

from rlcore.api import RLCoreError


@click.command("gsm8k")
@click.option("--input", "input_dir", type=click.Path(file_okay=False), help="Folder with train.jsonl and test.jsonl.")
@click.option("--local-dir", default="~/data/gsm8k", show_default=True, help="Where to write train/test parquet.")
def data_gsm8k(input_dir: str | None, local_dir: str) -> None:
    """Write GSM8K as train.parquet / test.parquet (from --input, else openai/gsm8k via `datasets`)."""
    import os

    from rlcore_plugin_tasks.prepare.gsm8k import prepare_gsm8k

    for split, path in prepare_gsm8k(input_dir, os.path.expanduser(local_dir)).items():
        click.echo(f"{split}: {path}")


@click.command("geo3k")
@click.option(
    "--input",
    "input_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder with the train/test splits: {split}.parquet|.jsonl or data/{split}-*.parquet (problem, answer, images).",
)
@click.option("--local-dir", default="~/data/geo3k", show_default=True, help="Where to write train/test parquet.")
def data_geo3k(input_dir: str, local_dir: str) -> None:
    """Write Geometry3K as train.parquet / test.parquet with images (verl's geo3k schema)."""
    import os

    from rlcore_plugin_tasks.prepare.geo3k import prepare_geo3k

    for split, path in prepare_geo3k(input_dir, os.path.expanduser(local_dir)).items():
        click.echo(f"{split}: {path}")


def add_commands(cli: click.Group) -> None:
    """Add ``gsm8k`` and ``geo3k`` to the ``data`` group of the ``rlcore`` group ``cli``."""
    data = cli.commands.get("data")
    if not isinstance(data, click.Group):
        raise RLCoreError("the rlcore command line has no `data` group to add `gsm8k` and `geo3k` to")
    data.add_command(data_gsm8k)
    data.add_command(data_geo3k)
