"""The FSDP backend against rlcore's training-backend contract suite."""

from rlcore_testkit.contracts.backend import TrainingBackendContract


class TestFSDPBackend(TrainingBackendContract):
    """Runs every contract test for ``actor_rollout_ref.actor.strategy=fsdp``."""

    component_name = "fsdp"
