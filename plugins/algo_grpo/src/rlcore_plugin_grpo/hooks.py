"""rlcore hooks of the GRPO plugin. Imports no torch: the estimators are registered as lazy targets."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from rlcore import hookimpl
from rlcore.api import AdvantageEstimatorSpec, ConfigError
from rlcore_plugin_grpo.config import GRPOAlgorithmConfig

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_advantage_estimators(register: Any) -> None:
    """Register ``grpo`` (group-relative outcome advantages, groups of any size, even 1) and ``grpo_passk``
    (the best response's margin over the runner-up; declares a ``min_group_size`` of 2)."""
    register(
        "grpo",
        "rlcore_plugin_grpo.advantage:compute_grpo_outcome_advantage",
        description="GRPO: (r - group mean) / (group std + eps), no critic",
    )
    register(
        "grpo_passk",
        "rlcore_plugin_grpo.advantage:compute_grpo_passk_outcome_advantage",
        description="Pass@k: only each group's best response learns, from its margin over the runner-up",
        spec=AdvantageEstimatorSpec(min_group_size=2),
    )
    register(
        "gdpo",
        "rlcore_plugin_grpo.gdpo:compute_gdpo_outcome_advantage",
        description="GDPO: each reward component normalised within its group, then summed and whitened",
    )


@hookimpl
def register_reward_managers(register: Any) -> None:
    """Register ``gdpo``, verl 0.10's reward manager of its GDPO examples: the naive manager (each key of the
    dict the reward function returns becomes a per-sample extra, which ``adv_estimator=gdpo`` reads)."""
    register(
        "gdpo",
        "rlcore.reward.managers:NaiveRewardManager",
        description="verl's GDPO reward manager: one sample at a time, a dict score's keys kept as extras",
    )


@hookimpl
def config_defaults() -> GRPOAlgorithmConfig:
    """Declare ``algorithm.norm_adv_by_std_in_grpo`` (false gives Dr. GRPO's unscaled advantages) and GDPO's
    ``algorithm.gdpo_reward_keys`` (the reward components it normalises one by one) and
    ``algorithm.gdpo_reward_weights`` (their weights in the sum; null: all 1), typed
    (:class:`~rlcore_plugin_grpo.config.GRPOAlgorithmConfig`)."""
    return GRPOAlgorithmConfig()


@hookimpl
def on_config_resolved(config: DictConfig) -> None:
    """Check GDPO's settings before any model loads: ``algorithm.adv_estimator=gdpo`` needs
    ``algorithm.gdpo_reward_keys``, and ``gdpo_reward_weights`` (when set) has one weight per key."""
    if config.algorithm.adv_estimator != "gdpo":
        return
    section = GRPOAlgorithmConfig.from_tree(config)
    keys = list(section.gdpo_reward_keys or [])
    if not keys:
        raise ConfigError(
            "algorithm.adv_estimator=gdpo needs algorithm.gdpo_reward_keys: the keys of the dict your reward "
            "function returns that GDPO normalises one by one (e.g. '[accuracy_reward, format_reward]')"
        )
    weights = section.gdpo_reward_weights
    if weights is not None and len(weights) != len(keys):
        raise ConfigError(
            f"algorithm.gdpo_reward_weights has {len(weights)} weights for the {len(keys)} keys of "
            "algorithm.gdpo_reward_keys"
        )
