"""rlcore hooks of the PRIME plugin. Imports no torch: the estimator, the worker and the preset are lazy."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl
from rlcore.api import AdvantageEstimatorSpec

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"

#: verl's PRIME settings (``recipe/prime``), with verl's defaults
CONFIG_DEFAULTS: dict[str, Any] = {
    "algorithm": {
        "reward_dpo_coef": 5.0,  # weight of the implicit process rewards
        "reward_gt_coef": 5.0,  # weight of the outcome (rule) reward
    },
    "reward_model": {
        "mini_batch_size": "${actor_rollout_ref.actor.ppo_mini_batch_size}",  # prompts per PRM optimizer step
        "prime_granularity": "token",  # token: a reward per token; whole: their sum on the last token
        "prime_norm": "batch_norm",  # batch_norm: divide by the batch's largest |reward-to-go|; none
        "model": {
            "update": "before",  # before | after | none: train the PRM before or after scoring the batch
            "beta_train": 0.05,  # β of r_t = β·(log π_φ − log π_ref)
            "loss_type": "ce",  # the PRM's loss: cross-entropy of σ(Σ r_t) against the outcome label
            "ref_type": "freeze",  # the reference of the implicit PRM: its frozen initial weights
        },
        "optim": {
            "lr": 1.0e-6,
            "lr_warmup_steps": -1,
            "lr_warmup_steps_ratio": 0.0,
            "min_lr_ratio": 0.0,
            "num_cycles": 0.5,
            "lr_scheduler_type": "constant",
            "warmup_style": None,
            "weight_decay": 0.0,
            "betas": [0.9, 0.999],
            "clip_grad": 10.0,
            "total_training_steps": -1,
        },
    },
}


@hookimpl
def register_advantage_estimators(register: Any) -> None:
    """Register ``prime``: RLOO on the implicit process rewards and on the outcome reward, combined."""
    register(
        "prime",
        "rlcore_plugin_prime.advantage:compute_prime_advantage",
        description="PRIME: RLOO on implicit PRM token rewards + outcome reward, PRM trained online",
        spec=AdvantageEstimatorSpec(
            min_group_size=2,
            batch_keys=frozenset({"rm_scores", "acc"}),
            reward_model_worker="rlcore_plugin_prime.worker:PrimeRewardModelWorker",
        ),
    )


@hookimpl
def register_presets(register: Any) -> None:
    """Register the ``prime`` preset: the ``prime`` estimator (its implicit PRM starts from the policy)."""
    register(
        "prime",
        "rlcore_plugin_prime.hooks:preset",
        description="PRIME: implicit PRM from the policy's weights, trained online on the rule rewards",
    )


def preset() -> dict[str, Any]:
    """The ``prime`` preset's config fragment."""
    return {"algorithm.adv_estimator": "prime"}


@hookimpl
def config_defaults() -> dict[str, Any]:
    """verl's PRIME keys: ``algorithm.reward_{dpo,gt}_coef`` and the implicit PRM's ``reward_model.*``."""
    return CONFIG_DEFAULTS
