"""rlcore hooks of the DAPO plugin. Imports no torch: components are registered as lazy targets."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from rlcore import hookimpl
from rlcore.api import ConfigError
from rlcore_plugin_dapo.config import FilterGroupsConfig, OverlongBufferConfig
from rlcore_plugin_dapo.settings import FILTER_NAME, overlong_buffer

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"

#: the ``dapo`` preset: verl's DAPO recipe switches (sizes and learning rate are the task's business)
DAPO_PRESET: dict[str, Any] = {
    "algorithm.adv_estimator": "grpo",
    "algorithm.use_kl_in_reward": False,
    "algorithm.filter_groups.enable": True,
    "algorithm.filter_groups.metric": "seq_reward",
    "actor_rollout_ref.actor.clip_ratio_low": 0.2,
    "actor_rollout_ref.actor.clip_ratio_high": 0.28,
    "actor_rollout_ref.actor.clip_ratio_c": 10.0,
    "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
    "actor_rollout_ref.actor.use_kl_loss": False,
    "reward_model.reward_manager": "dapo",
    "reward_model.overlong_buffer.enable": True,
    "reward_model.overlong_buffer.penalty_factor": 1.0,
}


@hookimpl
def register_reward_managers(register: Any) -> None:
    """Register the ``dapo`` reward manager: naive scoring plus the overlong penalty."""
    register(
        "dapo",
        "rlcore_plugin_dapo.reward:DAPORewardManager",
        description="naive scoring + DAPO's soft overlong punishment (reward_model.overlong_buffer)",
    )


@hookimpl
def register_batch_filters(register: Any) -> None:
    """Register ``dapo-groups``: keep the prompt groups whose metric varies (dynamic sampling)."""
    register(
        FILTER_NAME,
        "rlcore_plugin_dapo.filters:keep_varied_groups",
        description="DAPO dynamic sampling: drop prompt groups whose algorithm.filter_groups.metric is constant",
    )


@hookimpl
def register_presets(register: Any) -> None:
    """Register the ``dapo`` preset (``rlcore run --preset dapo``)."""
    register(
        "dapo",
        DAPO_PRESET,
        description="DAPO: clip-higher 0.2/0.28, token-mean, overlong shaping, dynamic sampling, GRPO, no KL",
    )


@hookimpl
def config_defaults() -> list[OverlongBufferConfig | FilterGroupsConfig]:
    """Declare ``reward_model.overlong_buffer.*`` and ``algorithm.filter_groups.*`` (verl's DAPO keys), typed
    (:mod:`rlcore_plugin_dapo.config`)."""
    return [OverlongBufferConfig(), FilterGroupsConfig()]


@hookimpl
def on_config_resolved(config: DictConfig) -> None:
    """Translate verl's DAPO switches into rlcore's mechanisms and check them before any model is loaded.

    ``algorithm.filter_groups.enable=true`` appends the ``dapo-groups`` filter to ``algorithm.batch_filters``
    and, when ``filter_groups.max_num_gen_batches`` is set, copies it to ``algorithm.max_num_gen_batches``
    (the controller's limit on generation rounds). ``reward_model.overlong_buffer.enable=true`` requires
    ``reward_model.reward_manager=dapo`` and records the effective buffer length in ``len``.
    """
    algorithm = config.algorithm
    groups = algorithm.filter_groups
    if groups.enable:
        if FILTER_NAME not in algorithm.batch_filters:
            algorithm.batch_filters = [*algorithm.batch_filters, FILTER_NAME]
        if groups.max_num_gen_batches is not None:
            algorithm.max_num_gen_batches = int(groups.max_num_gen_batches)
    reward = config.reward_model
    if reward.overlong_buffer.enable:
        if reward.reward_manager != "dapo":
            raise ConfigError(
                "reward_model.overlong_buffer.enable=true is applied by the dapo reward manager, but "
                f"reward_model.reward_manager={reward.reward_manager!r}; set reward_model.reward_manager=dapo"
            )
        reward.overlong_buffer.len = overlong_buffer(OverlongBufferConfig.from_tree(config)).length
