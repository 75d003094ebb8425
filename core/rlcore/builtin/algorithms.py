"""Built-in algorithm pieces: the vanilla (clipped, dual-clip) PPO policy loss."""

from rlcore.hookspecs import hookimpl


@hookimpl
def register_policy_losses(register):
    """Register the vanilla PPO policy loss."""
    register(
        "vanilla",
        "rlcore.algos.losses:vanilla_policy_loss",
        description="PPO clipped surrogate with clip_ratio_low/high and dual-clip c",
    )
