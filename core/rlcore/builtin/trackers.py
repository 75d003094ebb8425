"""Built-in metric sinks: the console, the run's own JSONL metrics file, and the external experiment trackers
(each needing its optional dependency: ``pip install 'rlcore[swanlab]'``, ``[wandb]``, ``[tensorboard]``,
``[mlflow]``, or ``[trackers]`` for all four)."""

from rlcore.hookspecs import hookimpl


@hookimpl
def register_trackers(register):
    """Register the console, JSONL, swanlab, wandb, tensorboard and mlflow trackers."""
    register("console", "rlcore.tracking.sinks:ConsoleTracker", description="step:N - key:value lines on stdout")
    register("jsonl", "rlcore.tracking.sinks:JsonlTracker", description="metrics.jsonl in the run directory (always on)")
    register("swanlab", "rlcore.tracking.swanlab_tracker:SwanlabTracker",
             description="SwanLab: cloud, local or offline (trainer.tracking.swanlab)")
    register("wandb", "rlcore.tracking.wandb_tracker:WandbTracker", aliases=("tracking",),
             description="Weights & Biases: online or offline (trainer.tracking.wandb)")
    register("tensorboard", "rlcore.tracking.tensorboard_tracker:TensorboardTracker",
             description="TensorBoard event files (trainer.tracking.tensorboard)")
    register("mlflow", "rlcore.tracking.mlflow_tracker:MlflowTracker",
             description="MLflow; a local file store by default (trainer.tracking.mlflow)")
