"""The DeepSpeed backend against rlcore's training-backend contract suite, at ZeRO stages 1, 2 and 3."""

from rlcore_testkit.contracts.backend import TrainingBackendContract


class TestZero1(TrainingBackendContract):
    """Every contract test with ZeRO-1 (optimizer state partitioned)."""

    component_name = "deepspeed"
    config_overrides = {
        "actor_rollout_ref.actor.deepspeed_config.zero_stage": 1,
        "actor_rollout_ref.ref.deepspeed_config.zero_stage": 1,
        "critic.deepspeed_config.zero_stage": 1,
    }


class TestZero2(TrainingBackendContract):
    """Every contract test with ZeRO-2 (also gradients partitioned; the plugin's default)."""

    component_name = "deepspeed"


class TestZero3(TrainingBackendContract):
    """Every contract test with ZeRO-3 (also parameters partitioned, gathered in buckets for export)."""

    component_name = "deepspeed"
    config_overrides = {
        "actor_rollout_ref.actor.deepspeed_config.zero_stage": 3,
        "actor_rollout_ref.ref.deepspeed_config.zero_stage": 3,
        "critic.deepspeed_config.zero_stage": 3,
    }
