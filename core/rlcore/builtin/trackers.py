"""Built-in metric sinks: the console and the run's own JSONL metrics file.

The external experiment trackers are plugins of their own (``rlcore-plugin-swanlab``, ``-wandb``,
``-tensorboard``, ``-mlflow``; ``pip install 'rlcore[trackers]'`` installs all four) built on
:class:`rlcore.tracking.external.ExternalTracker`."""

from rlcore.hookspecs import hookimpl


@hookimpl
def register_trackers(register):
    """Register the console and JSONL trackers (``file``, verl's name, is the JSONL one)."""
    register("console", "rlcore.tracking.sinks:ConsoleTracker", description="step:N - key:value lines on stdout")
    register(
        "jsonl",
        "rlcore.tracking.sinks:JsonlTracker",
        description="metrics.jsonl in the run directory (always on)",
        aliases=("file",),  # verl's name for its JSONL file logger
    )
