"""The rollout engine: rlcore's contract suite on a tiny model (shapes, EOS padding, seeds, weight updates)."""

from rlcore_testkit.contracts import RolloutEngineContract


class TestRolloutEngineContract(RolloutEngineContract):
    """rlcore's behavioural checks for ``actor_rollout_ref.rollout.name={{ cookiecutter.hyphenated }}``."""

    component_name = "{{ cookiecutter.hyphenated }}"
