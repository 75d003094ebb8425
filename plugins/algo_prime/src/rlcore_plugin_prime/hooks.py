"""rlcore hooks of the PRIME plugin. Imports no torch: the estimator, the worker and the preset are lazy."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl
from rlcore.api import AdvantageEstimatorSpec
from rlcore_plugin_prime.config import PrimeAlgorithmConfig, PrimeRewardModelConfig

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


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
def config_defaults() -> list[PrimeAlgorithmConfig | PrimeRewardModelConfig]:
    """verl's PRIME keys: ``algorithm.reward_{dpo,gt}_coef`` and the implicit PRM's ``reward_model.*``, typed
    (:mod:`rlcore_plugin_prime.config`)."""
    return [PrimeAlgorithmConfig(), PrimeRewardModelConfig()]
