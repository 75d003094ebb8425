"""rlcore hooks of the GSPO plugin. Imports no torch: the loss is registered as a lazy target."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"

#: the ``gspo`` preset: GRPO advantages, the GSPO loss with the paper's clip range, no KL terms
GSPO_PRESET: dict[str, Any] = {
    "algorithm.adv_estimator": "grpo",
    "algorithm.use_kl_in_reward": False,
    "actor_rollout_ref.actor.policy_loss.loss_mode": "gspo",
    "actor_rollout_ref.actor.clip_ratio_low": 3e-4,
    "actor_rollout_ref.actor.clip_ratio_high": 4e-4,
    "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean",
    "actor_rollout_ref.actor.use_kl_loss": False,
}


@hookimpl
def register_policy_losses(register: Any) -> None:
    """Register the ``gspo`` policy loss (sequence-level clipped importance ratio)."""
    register(
        "gspo",
        "rlcore_plugin_gspo.loss:gspo_policy_loss",
        description="GSPO: clipped sequence-level ratio exp(mean token log-ratio), aggregated by loss_agg_mode",
    )


@hookimpl
def register_presets(register: Any) -> None:
    """Register the ``gspo`` preset (``rlcore run --preset gspo``)."""
    register("gspo", GSPO_PRESET, description="GSPO loss, eps 3e-4/4e-4, GRPO advantages, no KL")
