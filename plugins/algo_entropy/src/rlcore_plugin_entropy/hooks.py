"""rlcore hooks of the entropy-mechanism plugin. Imports no torch: the losses are registered as lazy targets."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_policy_losses(register: Any) -> None:
    """Register ``clip_cov`` and ``kl_cov``; both read ``actor_rollout_ref.actor.policy_loss.*``."""
    register(
        "clip_cov",
        "rlcore_plugin_entropy.losses:clip_cov_policy_loss",
        description="Clip-Cov: PPO clip, and no gradient for a few random high-covariance tokens",
    )
    register(
        "kl_cov",
        "rlcore_plugin_entropy.losses:kl_cov_policy_loss",
        description="KL-Cov: unclipped -A*ratio plus a |log-ratio| penalty on the top-covariance tokens",
    )
