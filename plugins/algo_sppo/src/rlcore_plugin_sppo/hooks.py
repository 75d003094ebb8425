"""rlcore hooks of the SPPO plugin: estimator and loss (lazy targets, no torch here), the preset and verl's
two ``sppo_eta`` keys."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl
from rlcore_plugin_sppo.config import SPPOActorConfig, SPPOAlgorithmConfig

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"

#: the ``sppo`` preset: verl's recipe without its trainer subclass (no KL terms, one sequence-level loss)
SPPO_PRESET: dict[str, Any] = {
    "algorithm.adv_estimator": "sppo",
    "algorithm.use_kl_in_reward": False,
    "actor_rollout_ref.actor.policy_loss.loss_mode": "sppo",
    "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean",
    "actor_rollout_ref.actor.use_kl_loss": False,
}


@hookimpl
def register_advantage_estimators(register: Any) -> None:
    """Register ``sppo``: each response's reward minus the batch's soft-mean reward."""
    register(
        "sppo",
        "rlcore_plugin_sppo.sppo:compute_sppo_advantage",
        description="SPPO: r - softmean_beta(r) over the batch (beta = algorithm.sppo_eta)",
    )


@hookimpl
def register_policy_losses(register: Any) -> None:
    """Register the ``sppo`` policy loss (squared error of the sequence log-ratio against η·A)."""
    register(
        "sppo",
        "rlcore_plugin_sppo.sppo:sppo_policy_loss",
        description="SPPO: mean over sequences of (log pi/pi_old summed over tokens - eta·A)^2",
    )


@hookimpl
def register_presets(register: Any) -> None:
    """Register the ``sppo`` preset (``rlcore run --preset sppo``)."""
    register("sppo", SPPO_PRESET, description="SPPO: soft-mean baseline, squared log-ratio loss, no KL")


@hookimpl
def config_defaults() -> list[SPPOAlgorithmConfig | SPPOActorConfig]:
    """Declare ``algorithm.sppo_eta`` and ``actor_rollout_ref.actor.sppo_eta`` (both 1.0, verl's recipe), typed
    (:mod:`rlcore_plugin_sppo.config`)."""
    return [SPPOAlgorithmConfig(), SPPOActorConfig()]
