"""The bundled CPU task that ``rlcore run`` trains by default: its scorer and its preset."""

from rlcore.hookspecs import hookimpl


@hookimpl
def register_reward_scorers(register):
    """Register the scorer of the bundled arithmetic task."""
    register("rlcore/arith", "rlcore.tasks.arith:score", description="bundled task: exact answer of a small sum")


@hookimpl
def register_presets(register):
    """Register the bundled task's preset (applied by ``rlcore run`` when no data is given)."""
    register(
        "arith-cpu",
        "rlcore.tasks.arith:cpu_preset",
        description="bundled CPU task: GRPO on small sums from a biased warm-started model",
    )
