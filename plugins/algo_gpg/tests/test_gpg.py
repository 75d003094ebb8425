"""Hand-computed GPG advantages (α, singletons, equal rewards, masked middle tokens) and losses, the
registration, the estimator and loss contracts, and a short real run."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from rlcore_plugin_gpg.gpg import compute_gpg_outcome_advantage, gpg_policy_loss
from rlcore_testkit.contracts import AdvantageEstimatorContract, PolicyLossContract
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.api import ActorConfig, AlgorithmConfig
from rlcore.api.specs import AdvantageEstimatorSpec
from rlcore.plugins import load_plugins

# groups by uid, interleaved: a = [1, 0, 0], b = [2, 2] (equal), c = [0.7] (a singleton).
# B = 6 responses, 4 nonzero rewards: α = 6 / 4 = 1.5.
UIDS = np.array(["a", "b", "a", "c", "b", "a"], dtype=object)
SCORES = [1.0, 2.0, 0.0, 0.7, 2.0, 0.0]
EXPECTED = [1.5 * 2 / 3, 0.0, -1.5 / 3, 1.5 * 0.7, 0.0, -1.5 / 3]


def _inputs(scores: list[float] = SCORES) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards on the last token of R = 3; row 2 has a masked (tool) token at t = 1."""
    mask = torch.ones(len(scores), 3)
    mask[2, 1] = 0.0
    rewards = torch.zeros_like(mask)
    rewards[:, -1] = torch.tensor(scores)
    return rewards, mask


def test_gpg_advantage_hand_computed() -> None:
    rewards, mask = _inputs()
    adv, ret = compute_gpg_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=UIDS, config=AlgorithmConfig()
    )
    assert torch.allclose(adv, torch.tensor(EXPECTED).unsqueeze(1) * mask, atol=1e-6)
    assert torch.equal(adv, ret)
    assert adv[2, 1] == 0 and (adv[[1, 4]] == 0).all()  # masked middle token; equal rewards


def test_gpg_all_zero_rewards() -> None:
    rewards, mask = _inputs([0.0] * 6)
    adv, _ = compute_gpg_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=UIDS, config=AlgorithmConfig()
    )
    assert (adv == 0).all()  # α = 6 / max(1, 0) is finite and multiplies zeros


def test_gpg_loss_hand_computed() -> None:
    old = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -0.5]])
    log_prob = torch.tensor([[-0.5, -1.0, -9.0], [-1.0, -2.0, -3.0]], requires_grad=True)
    adv = torch.tensor([[2.0, 2.0, 2.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]])  # padding; a masked middle token
    loss, metrics = gpg_policy_loss(old, log_prob, adv, mask, "token-mean", ActorConfig())
    assert loss.item() == pytest.approx((2 * 0.5 + 2 * 1.0 - 1.0 - 3.0) / 4)
    assert metrics["actor/ppo_kl"] == pytest.approx((-0.5 - 1.0 + 0.5 + 2.5) / 4)
    loss.backward()
    assert torch.allclose(log_prob.grad, -adv * mask / 4)
    weights = torch.full_like(old, 0.5)
    half, _ = gpg_policy_loss(old, log_prob, adv, mask, "seq-mean-token-sum", ActorConfig(), rollout_is_weights=weights)
    assert half.item() == pytest.approx(0.5 * ((2 * 0.5 + 2 * 1.0) + (-1.0 - 3.0)) / 2)


def test_registration() -> None:
    registry = load_plugins().registry
    assert registry.get("advantage_estimator", "gpg").dist == "rlcore-plugin-gpg"
    assert registry.get("advantage_estimator", "gpg").spec == AdvantageEstimatorSpec()
    assert registry.get("policy_loss", "gpg").dist == "rlcore-plugin-gpg"


def test_hooks_module_does_not_import_torch() -> None:
    code = "import sys, rlcore_plugin_gpg.hooks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestGPGEstimatorContract(AdvantageEstimatorContract):
    """The GPG estimator passes the advantage-estimator contract."""

    component_name = "gpg"


class TestGPGLossContract(PolicyLossContract):
    """The GPG loss passes the policy-loss contract, except that its *value* is not signed by the advantage.

    −logπ·A is positive for A > 0 because logπ ≤ 0, so the two sign tests check what the contract is after,
    the direction of the learning signal, on the gradient instead of on the value.
    """

    component_name = "gpg"
    value_signed_by_advantage = False


def test_gpg_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps of the tiny task with the GPG estimator and loss."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=gpg",
        "actor_rollout_ref.actor.policy_loss.loss_mode=gpg",
    )
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"])
    assert "actor/pg_clipfrac" not in last  # no ratio, no clip
