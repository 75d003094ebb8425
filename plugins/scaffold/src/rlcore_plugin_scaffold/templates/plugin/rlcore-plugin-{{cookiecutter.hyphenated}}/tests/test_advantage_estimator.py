"""The advantage estimator: a hand-computed example and rlcore's contract suite."""

from __future__ import annotations

import numpy as np
import torch

from rlcore.api import AlgorithmConfig
from rlcore_testkit.contracts import AdvantageEstimatorContract
from rlcore_plugin_{{ cookiecutter.underscored }}.advantage_estimator import compute_advantage


def test_reward_minus_group_mean() -> None:
    """Group a has rewards 1, 0, 2 (mean 1); group b has one response, whose advantage is 0."""
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [2.0, 0.0], [5.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    index = np.array(["a", "a", "a", "b"], dtype=object)
    advantages, returns = compute_advantage(token_level_rewards=rewards, response_mask=mask, index=index, config=AlgorithmConfig())
    expected = torch.tensor([[0.0, 0.0], [-1.0, -1.0], [1.0, 0.0], [0.0, 0.0]])
    assert torch.equal(advantages, expected)
    assert torch.equal(returns, expected)


class TestAdvantageEstimatorContract(AdvantageEstimatorContract):
    """rlcore's behavioural checks for ``algorithm.adv_estimator={{ cookiecutter.hyphenated }}``."""

    component_name = "{{ cookiecutter.hyphenated }}"
