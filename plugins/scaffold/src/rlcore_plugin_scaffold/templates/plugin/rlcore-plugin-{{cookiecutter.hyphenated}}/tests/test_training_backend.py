"""The training backend: rlcore's contract suite on a tiny model, on CPU (workers and engines)."""

from rlcore_testkit.contracts import TrainingBackendContract


class TestTrainingBackendContract(TrainingBackendContract):
    """rlcore's behavioural checks for ``actor_rollout_ref.actor.strategy={{ cookiecutter.hyphenated }}``."""

    component_name = "{{ cookiecutter.hyphenated }}"
