"""Hand-computed CISPO losses and gradients (clipped weights keep their gradient), the registration, the
policy-loss contract and a short real run of the default tiny task."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_plugin_cispo.loss import cispo_policy_loss
from rlcore_testkit.contracts import PolicyLossContract
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.api import ActorConfig
from rlcore.plugins import load_plugins

# ratios 1.5 (clipped to 1.2), 0.5 (clipped to 0.8), 1.1 (kept), and a padded token
OLD = torch.tensor([[-1.0, -2.0, -0.5, -1.0]])
RATIO = torch.tensor([[1.5, 0.5, 1.1, 7.0]])
ADV = torch.tensor([[2.0, -1.0, 0.5, 3.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
CONFIG = ActorConfig(clip_ratio_low=0.2, clip_ratio_high=0.2)


def _loss(mode: str = "token-mean", **kwargs: Any) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
    log_prob = (OLD + torch.log(RATIO)).requires_grad_(True)
    loss, metrics = cispo_policy_loss(OLD, log_prob, ADV, MASK, mode, CONFIG, **kwargs)
    return loss, metrics, log_prob


def test_cispo_hand_computed() -> None:
    loss, metrics, log_prob = _loss()
    logp = (OLD + torch.log(RATIO))[0].tolist()
    tokens = [-1.2 * 2.0 * logp[0], -0.8 * -1.0 * logp[1], -1.1 * 0.5 * logp[2]]
    assert loss.item() == pytest.approx(sum(tokens) / 3, rel=1e-6)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(2 / 3)
    assert metrics["actor/ppo_kl"] == pytest.approx(-sum(math.log(r) for r in (1.5, 0.5, 1.1)) / 3, rel=1e-6)
    loss.backward()
    # ∂/∂logπ = −sg(clip(r))·A / N: the clipped tokens keep their gradient (PPO would give 0 on token 0)
    expected = torch.tensor([[-1.2 * 2.0, 0.8 * 1.0, -1.1 * 0.5, 0.0]]) / 3
    assert torch.allclose(log_prob.grad, expected, atol=1e-6)


def test_cispo_aggregation_and_weights() -> None:
    base, _, _ = _loss("seq-mean-token-sum")
    assert base.item() == pytest.approx(3 * _loss()[0].item(), rel=1e-6)  # one sequence of 3 tokens
    weights = torch.tensor([[0.5, 0.5, 0.5, 9.0]])
    assert _loss(rollout_is_weights=weights)[0].item() == pytest.approx(0.5 * _loss()[0].item(), rel=1e-6)


def test_registration() -> None:
    assert load_plugins().registry.get("policy_loss", "cispo").dist == "rlcore-plugin-cispo"


def test_hooks_module_does_not_import_torch() -> None:
    code = "import sys, rlcore_plugin_cispo.hooks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestCISPOLossContract(PolicyLossContract):
    """The CISPO loss passes the policy-loss contract; like GPG's, its value is −c·A·logπ, positive for A > 0,
    so the two sign tests check the direction of the gradient instead of the value."""

    component_name = "cispo"
    value_signed_by_advantage = False


def test_cispo_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps of the tiny task with GRPO advantages and the CISPO loss (verl's example's clip range)."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.policy_loss.loss_mode=cispo",
        "actor_rollout_ref.actor.clip_ratio_low=10",
        "actor_rollout_ref.actor.clip_ratio_high=0.2",
    )
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"]) and "actor/pg_clipfrac" in last
