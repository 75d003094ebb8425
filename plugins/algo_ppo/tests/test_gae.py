"""Hand-computed GAE (γ, λ ≠ 1, masked middle tokens), its registration and the estimator contract."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from rlcore_plugin_ppo.gae import compute_gae
from rlcore_testkit.contracts.algorithms import AdvantageEstimatorContract

from rlcore.api import AlgorithmConfig
from rlcore.api.specs import AdvantageEstimatorSpec
from rlcore.errors import RLCoreError
from rlcore.plugins import load_plugins

CONFIG = AlgorithmConfig(gamma=0.9, lam=0.8)
# One response of three valid tokens, rewards [0, 0, 1], values [0.5, 0.4, 0.3], γλ = 0.72:
#   t=2: δ = 1 - 0.3 = 0.7;                  A = 0.7
#   t=1: δ = 0.9·0.3 - 0.4 = -0.13;          A = -0.13 + 0.72·0.7   = 0.374
#   t=0: δ = 0.9·0.4 - 0.5 = -0.14;          A = -0.14 + 0.72·0.374 = 0.12928
RAW = [0.12928, 0.374, 0.7]
RETURNS = [0.12928 + 0.5, 0.374 + 0.4, 0.7 + 0.3]


def _batch(masked_value: float) -> dict[str, torch.Tensor]:
    """Row 0: the example right-padded to R = 4; row 1: the example with a masked token at t = 1."""
    return {
        "token_level_rewards": torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]),
        "values": torch.tensor([[0.5, 0.4, 0.3, 9.0], [0.5, masked_value, 0.4, 0.3]]),
        "response_mask": torch.tensor([[1, 1, 1, 0], [1, 0, 1, 1]]),
    }


def _run(masked_value: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE of :func:`_batch` with γ = 0.9, λ = 0.8."""
    batch = _batch(masked_value)
    return compute_gae(**batch, index=np.array(["a", "b"], dtype=object), config=CONFIG)


def test_gae_hand_computed() -> None:
    advantages, returns = _run()
    assert torch.allclose(returns, torch.tensor([[*RETURNS, 0.0], [RETURNS[0], 0.0, *RETURNS[1:]]]), atol=1e-6)
    raw = torch.tensor(RAW * 2)
    whitened = (raw - raw.mean()) / torch.sqrt(torch.var(raw) + 1e-8)  # unbiased batch variance
    expected = torch.tensor([[*whitened[:3], 0.0], [whitened[3], 0.0, *whitened[4:]]])
    assert torch.allclose(advantages, expected, atol=1e-5)


@pytest.mark.parametrize("masked_value", [-7.0, 1e6, float("nan")])
def test_masked_middle_token_is_skipped(masked_value: float) -> None:
    advantages, returns = _run()
    other_adv, other_ret = _run(masked_value)
    assert torch.equal(advantages, other_adv)
    assert torch.equal(returns, other_ret)


def test_gae_defaults_are_monte_carlo() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.2, 0.5, 0.1]])
    _, returns = compute_gae(
        token_level_rewards=rewards,
        values=values,
        response_mask=torch.ones(1, 3),
        index=np.array(["a"], dtype=object),
        config=AlgorithmConfig(),
    )
    assert torch.allclose(returns, torch.ones(1, 3))  # γ = λ = 1: returns = Σ future rewards


def test_gae_needs_values() -> None:
    with pytest.raises(RLCoreError, match="critic"):
        compute_gae(token_level_rewards=torch.zeros(1, 2), response_mask=torch.ones(1, 2), index=None, config=CONFIG)


def test_registration_declares_critic() -> None:
    comp = load_plugins().registry.get("advantage_estimator", "gae")
    assert comp.dist == "rlcore-plugin-ppo"
    assert comp.spec == AdvantageEstimatorSpec(needs_critic=True)


def test_hooks_module_does_not_import_torch() -> None:
    code = "import sys, rlcore_plugin_ppo.hooks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestGAEContract(AdvantageEstimatorContract):
    """GAE passes the advantage-estimator contract (it is not group-relative)."""

    component_name = "gae"
    group_relative = False
    config_overrides = {"algorithm.gamma": 0.99, "algorithm.lam": 0.95}
