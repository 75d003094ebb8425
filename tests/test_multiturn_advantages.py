"""Multi-turn rollouts put tool and interaction tokens inside the response with ``response_mask`` 0. Whatever
rewards or values sit on those tokens must not change GAE or GRPO advantages on the policy's tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rlcore_testkit.config import contract_section

from rlcore.api import AlgorithmConfig
from rlcore.plugins import load_plugins


def multi_turn_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """Eight responses of 24 tokens: policy turns (mask 1) separated by tool turns (mask 0), then padding; the
    outcome reward on each response's last policy token, critic values everywhere."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.zeros(8, 24, dtype=torch.long)
    for row in range(8):
        length = 12 + row
        mask[row, :length] = 1
        mask[row, 3 + row % 3 : 7 + row % 3] = 0  # a tool turn
        if row % 2:
            mask[row, 9:11] = 0  # a second one
    rewards = torch.zeros(8, 24)
    last = torch.tensor([int(torch.nonzero(m).max()) for m in mask])
    rewards[torch.arange(8), last] = torch.randint(0, 2, (8,), generator=gen).float()
    values = torch.randn(8, 24, generator=gen)
    return {"mask": mask, "rewards": rewards, "values": values}


def scribble(tensor: torch.Tensor, mask: torch.Tensor, seed: int) -> torch.Tensor:
    """``tensor`` with arbitrary large values written where ``mask`` is 0."""
    noise = torch.randn(tensor.shape, generator=torch.Generator().manual_seed(seed)) * 1000
    return torch.where(mask.bool(), tensor, noise)


@pytest.mark.parametrize("estimator", ["gae", "grpo"])
def test_masked_positions_do_not_change_advantages(estimator: str) -> None:
    compute = load_plugins().registry.load("advantage_estimator", estimator)
    data = multi_turn_batch()
    mask = data["mask"]
    index = np.array([i // 4 for i in range(8)], dtype=object)
    config = contract_section(
        AlgorithmConfig, {"algorithm.gamma": 0.99, "algorithm.lam": 0.95, "algorithm.norm_adv_by_std_in_grpo": True}
    )

    def run(rewards: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return compute(token_level_rewards=rewards, response_mask=mask, index=index, config=config, values=values)

    clean_adv, clean_ret = run(data["rewards"], data["values"])
    for seed in range(3):
        adv, ret = run(scribble(data["rewards"], mask, seed), scribble(data["values"], mask, seed + 10))
        torch.testing.assert_close(adv, clean_adv, rtol=0, atol=1e-6)
        torch.testing.assert_close(ret[mask.bool()], clean_ret[mask.bool()], rtol=0, atol=1e-5)
    assert bool((clean_adv[~mask.bool()] == 0).all())
    assert bool(clean_adv[mask.bool()].abs().gt(0).any())  # the test has signal to lose


def test_gae_carries_values_across_a_tool_turn() -> None:
    """With γ = λ = 1 and a reward only at the end, GAE's advantage on a policy token before a tool turn is the
    reward minus that token's value: the tool turn neither adds nor drops anything."""
    compute = load_plugins().registry.load("advantage_estimator", "gae")
    mask = torch.tensor([[1, 1, 0, 0, 1, 1]])
    rewards = torch.tensor([[0.0, 0.0, 5.0, 5.0, 0.0, 1.0]])
    values = torch.tensor([[0.1, 0.2, 9.0, 9.0, 0.3, 0.4]])
    _, returns = compute(
        token_level_rewards=rewards, response_mask=mask, index=None, config=AlgorithmConfig(), values=values
    )
    torch.testing.assert_close(returns, torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 1.0]]))
