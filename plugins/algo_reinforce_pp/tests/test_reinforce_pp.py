"""Hand-computed REINFORCE++ and REINFORCE++-baseline advantages (γ < 1, masked middle tokens, singletons,
equal rewards), the registration, the estimator contracts and short real runs."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from rlcore_plugin_reinforce_pp.advantage import (
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
)
from rlcore_testkit.contracts.algorithms import AdvantageEstimatorContract
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.api import AlgorithmConfig
from rlcore.api.specs import AdvantageEstimatorSpec
from rlcore.plugins import load_plugins


def _whiten(values: list[float]) -> torch.Tensor:
    """(x − mean) / sqrt(unbiased var + 1e-8), as rlcore.algos.masked_whiten over the masked-in tokens."""
    x = torch.tensor(values)
    return (x - x.mean()) / torch.sqrt(torch.var(x) + 1e-8)


# Row 0: reward 1 on t = 2, right-padded at t = 3. Row 1: a masked (tool) token at t = 1, reward 1 on t = 3.
# γ = 0.5. Row 0: G = [0.25, 0.5, 1]. Row 1: G_3 = 1, G_2 = 0.5, the scan resets at t = 1, so G_0 = 0.
REWARDS = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 1.0]])
RETURNS = torch.tensor([[0.25, 0.5, 1.0, 0.0], [0.0, 0.0, 0.5, 1.0]])


def _rfpp(rewards: torch.Tensor = REWARDS, gamma: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ on the example with discount ``gamma``."""
    return compute_reinforce_plus_plus_outcome_advantage(
        token_level_rewards=rewards,
        response_mask=MASK,
        index=np.array(["a", "b"], dtype=object),
        config=AlgorithmConfig(gamma=gamma),
    )


def test_reinforce_pp_hand_computed() -> None:
    adv, ret = _rfpp()
    assert torch.allclose(ret, RETURNS, atol=1e-6)
    valid = MASK.bool()
    expected = torch.zeros_like(adv)
    expected[valid] = _whiten(RETURNS[valid].tolist())
    assert torch.allclose(adv, expected, atol=1e-5)


def test_reinforce_pp_masked_tokens() -> None:
    adv, ret = _rfpp()
    assert (adv[~MASK.bool()] == 0).all() and (ret[~MASK.bool()] == 0).all()
    noisy = REWARDS.clone()
    noisy[1, 1] = 5.0  # a reward on the masked token is dropped by the reset, like the token itself
    noisy[0, 3] = -3.0  # and so is one on padding
    adv2, ret2 = _rfpp(noisy)
    assert torch.equal(adv, adv2) and torch.equal(ret, ret2)


def test_reinforce_pp_default_gamma_is_one() -> None:
    _, ret = compute_reinforce_plus_plus_outcome_advantage(
        token_level_rewards=REWARDS, response_mask=MASK, index=None, config=AlgorithmConfig()
    )
    assert torch.allclose(ret, torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0]]))


# Baseline variant: a = [1, 0, 0] (lengths 2, 3, 1), b = [2, 2] (equal), c = [0.7] (a singleton); row 2 has a
# masked middle token. Centred: a: 2/3, -1/3, -1/3; b: 0, 0; c: 0.7 (group mean 0 for a singleton).
UIDS = np.array(["a", "b", "a", "c", "b", "a"], dtype=object)
SCORES = [1.0, 2.0, 0.0, 0.7, 2.0, 0.0]
CENTRED = [2 / 3, 0.0, -1 / 3, 0.7, 0.0, -1 / 3]


def _baseline_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards on each response's last valid token and a mask with right padding and a masked middle token."""
    mask = torch.tensor(
        [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.float32
    )
    last = torch.tensor([1, 3, 3, 2, 1, 0])
    rewards = torch.zeros_like(mask)
    rewards[torch.arange(6), last] = torch.tensor(SCORES)
    return rewards, mask


def test_reinforce_pp_baseline_hand_computed() -> None:
    rewards, mask = _baseline_inputs()
    adv, ret = compute_reinforce_plus_plus_baseline_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=UIDS, config=AlgorithmConfig()
    )
    tokens = [c for c, n in zip(CENTRED, mask.sum(-1).long().tolist()) for _ in range(n)]
    expected = torch.zeros_like(adv)
    expected[mask.bool()] = _whiten(tokens)  # row-major order matches the token list
    assert torch.allclose(adv, expected, atol=1e-5)
    assert torch.equal(adv, ret)
    assert (adv[mask == 0] == 0).all()


def test_reinforce_pp_baseline_equal_groups_share_one_value() -> None:
    rewards, mask = _baseline_inputs()
    adv, _ = compute_reinforce_plus_plus_baseline_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=UIDS, config=AlgorithmConfig()
    )
    # group b (equal rewards) is centred to 0, which the batch whitening maps to -mean/std, not to 0
    valid_b = adv[[1, 4]][mask[[1, 4]].bool()]
    assert torch.allclose(valid_b, valid_b[0].expand_as(valid_b))
    assert adv[3, 0] > adv[0, 0] > 0 > adv[2, 0]  # singleton 0.7 > 2/3 > -1/3


def test_registration() -> None:
    registry = load_plugins().registry
    for name in ("reinforce_plus_plus", "reinforce_plus_plus_baseline"):
        comp = registry.get("advantage_estimator", name)
        assert comp.dist == "rlcore-plugin-reinforce-pp"
        assert comp.spec == AdvantageEstimatorSpec()


def test_hooks_module_does_not_import_torch() -> None:
    code = "import sys, rlcore_plugin_reinforce_pp.hooks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestReinforcePPContract(AdvantageEstimatorContract):
    """REINFORCE++ passes the contract; it has no group baseline."""

    component_name = "reinforce_plus_plus"
    group_relative = False
    config_overrides = {"algorithm.gamma": 0.9}


class TestReinforcePPBaselineContract(AdvantageEstimatorContract):
    """REINFORCE++-baseline passes the contract."""

    component_name = "reinforce_plus_plus_baseline"


@pytest.mark.parametrize("estimator", ["reinforce_plus_plus", "reinforce_plus_plus_baseline"])
def test_trains(estimator: str, tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps of the tiny task with each estimator."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(tmp_path, tiny_model_dir, task, f"algorithm.adv_estimator={estimator}")
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"])
    assert abs(last["critic/advantages/mean"]) < 1e-4  # whitened over the batch
