"""Built-in dataset: verl-schema prompt rows from parquet or jsonl files."""

from rlcore.hookspecs import hookimpl


@hookimpl
def register_datasets(register):
    """Register the built-in prompt dataset."""
    register(
        "rl",
        "rlcore.data.rl_dataset:RLDataset",
        description="verl-schema prompts (parquet/jsonl): chat template, truncation, overlong filter",
        aliases=("parquet", "jsonl"),
    )
