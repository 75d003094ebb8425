"""The Megatron backend against rlcore's training-backend contract suite."""

from rlcore_testkit.contracts.backend import TrainingBackendContract


class TestMegatronBackend(TrainingBackendContract):
    """Runs every contract test for ``actor_rollout_ref.actor.strategy=megatron``."""

    component_name = "megatron"
