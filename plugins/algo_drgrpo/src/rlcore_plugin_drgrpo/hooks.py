"""rlcore hooks of the Dr. GRPO plugin: one preset, a plain dict (no torch, nothing to import lazily)."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"

#: the ``drgrpo`` preset: GRPO advantages without the std division, a constant-normalised token sum, no KL loss
DRGRPO_PRESET: dict[str, Any] = {
    "algorithm.adv_estimator": "grpo",
    "algorithm.norm_adv_by_std_in_grpo": False,
    "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-sum-norm",
    "actor_rollout_ref.actor.use_kl_loss": False,
}


@hookimpl
def register_presets(register: Any) -> None:
    """Register the ``drgrpo`` preset (``rlcore run --preset drgrpo``)."""
    register(
        "drgrpo",
        DRGRPO_PRESET,
        description="Dr. GRPO: grpo without std scaling, seq-mean-token-sum-norm, no KL loss",
    )
