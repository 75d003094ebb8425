"""DPPO-Binary-TV (verl 0.10's ``policy_loss.loss_mode=dppo_tv``): hand-computed loss, gradient and metrics, the
policy-loss contract and a real two-step run."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from rlcore_plugin_ppo.dppo import dppo_tv_policy_loss
from rlcore_testkit.contracts import PolicyLossContract
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.api import ActorConfig
from rlcore.plugins import load_plugins

# p_old -> p per token: 0.5 -> 0.75 (moved +0.25), 0.5 -> 0.35 (-0.15), 0.2 -> 0.25 (+0.05), a padded token
OLD = torch.log(torch.tensor([[0.5, 0.5, 0.2, 0.9]]))
NEW = torch.log(torch.tensor([[0.75, 0.35, 0.25, 0.1]]))
ADV = torch.tensor([[2.0, -1.0, 0.5, 3.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
CONFIG = ActorConfig(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=1.2)


def test_dppo_tv_hand_computed() -> None:
    log_prob = NEW.clone().requires_grad_(True)
    loss, metrics = dppo_tv_policy_loss(OLD, log_prob, ADV, MASK, "token-mean", CONFIG)
    # token 0: A > 0 and p moved +0.25 > 0.2: no gradient, no loss
    # token 1: A < 0 and p moved -0.15 >= -0.2: kept, ratio 0.7 -> -(-1)·0.7·log 0.35
    # token 2: A > 0 and p moved +0.05: kept, ratio 1.25 truncated to c = 1.2 -> -0.5·1.2·log 0.25
    expected = (0.0 + 0.7 * math.log(0.35) - 0.6 * math.log(0.25)) / 3
    assert math.isclose(loss.item(), expected, rel_tol=1e-5)
    loss.backward()
    assert log_prob.grad is not None
    assert torch.allclose(log_prob.grad, torch.tensor([[0.0, 0.7 / 3, -0.6 / 3, 0.0]]), atol=1e-6)
    assert math.isclose(metrics["actor/pg_clipfrac"], 1 / 3, rel_tol=1e-6)  # token 0 left the region
    assert math.isclose(metrics["actor/pg_clipfrac_lower"], 1 / 3, rel_tol=1e-6)  # token 2's ratio truncated
    kl = (math.log(0.5 / 0.75) + math.log(0.5 / 0.35) + math.log(0.2 / 0.25)) / 3
    assert math.isclose(metrics["actor/ppo_kl"], kl, rel_tol=1e-5)


def test_dppo_tv_truncates_at_clip_ratio_c() -> None:
    """A truncation above every ratio (verl's DPPO recipes use 20): ratio 1.25 stays."""
    loss, metrics = dppo_tv_policy_loss(OLD, NEW, ADV, MASK, "token-mean", ActorConfig(clip_ratio_c=20.0))
    expected = (0.7 * math.log(0.35) - 0.5 * 1.25 * math.log(0.25)) / 3
    assert math.isclose(loss.item(), expected, rel_tol=1e-5)
    assert metrics["actor/pg_clipfrac_lower"] == 0.0


def test_dppo_tv_is_registered_by_the_ppo_plugin() -> None:
    assert load_plugins().registry.get("policy_loss", "dppo_tv").dist == "rlcore-plugin-ppo"


class TestDPPOTVContract(PolicyLossContract):
    """DPPO-TV passes the policy-loss contract; its value is −w·A·logπ (positive for A > 0), so the sign tests
    check the direction of the gradient instead of the value."""

    component_name = "dppo_tv"
    value_signed_by_advantage = False


def test_dppo_tv_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps of the tiny task with GRPO advantages and the DPPO-TV loss (verl's example's thresholds)."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.policy_loss.loss_mode=dppo_tv",
        "actor_rollout_ref.actor.clip_ratio_low=0.15",
        "actor_rollout_ref.actor.clip_ratio_high=0.15",
    )
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"]) and "actor/pg_clipfrac" in last
