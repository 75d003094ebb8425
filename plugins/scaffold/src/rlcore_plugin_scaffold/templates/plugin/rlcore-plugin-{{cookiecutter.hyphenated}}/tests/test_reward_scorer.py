"""The reward scorer: rlcore's contract suite with right and wrong answers."""

from rlcore_testkit.contracts import RewardScorerContract


class TestRewardScorerContract(RewardScorerContract):
    """rlcore's behavioural checks for the scorer of ``data_source={{ cookiecutter.hyphenated }}``."""

    component_name = "{{ cookiecutter.hyphenated }}"
    cases = [
        ("3 + 4 = 7, so the answer is 7", "7", 1.0),
        ("the total is 1,250.0 dollars", "1250", 1.0),
        ("7 apples, then 8", "7", 0.0),
        ("no number here", "7", 0.0),
    ]
