"""The reward manager: rlcore's contract suite (scores on the last valid token, decoding, dict extras,
safe scoring)."""

from rlcore_testkit.contracts import RewardManagerContract


class TestRewardManagerContract(RewardManagerContract):
    """rlcore's behavioural checks for ``reward_model.reward_manager={{ cookiecutter.hyphenated }}``."""

    component_name = "{{ cookiecutter.hyphenated }}"
