"""Hand-computed GMPO losses (sign-dependent log-ratio clip, geometric mean, sequence-mean advantage), the
gradient, the registration, the policy-loss contract and a short real run of the default tiny task."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rlcore_plugin_gmpo.loss import geo_mean_policy_loss
from rlcore_testkit.contracts import PolicyLossContract
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.api import ActorConfig
from rlcore.plugins import load_plugins

# ε = 0.4 (verl's example). Row 0, A = +1: Δ = [0.6, -0.6, 0.1] -> pessimistic [0.4, -0.6, 0.1]
#   (above the range a positive advantage is capped; below it keeps the raw, lower value)
# Row 1, A = -2: Δ = [0.6, -0.6, (masked 9)] -> pessimistic [0.6, -0.4]
OLD = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
DELTA = torch.tensor([[0.6, -0.6, 0.1], [0.6, -0.6, 9.0]])
ADV = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
CONFIG = ActorConfig(clip_ratio=0.4, clip_ratio_low=0.4, clip_ratio_high=0.4)


def _loss(mode: str = "token-mean") -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
    log_prob = (OLD + DELTA).requires_grad_(True)
    loss, metrics = geo_mean_policy_loss(OLD, log_prob, ADV, MASK, mode, CONFIG)
    return loss, metrics, log_prob


def test_gmpo_hand_computed() -> None:
    loss, metrics, log_prob = _loss()
    rho0 = math.exp((0.4 - 0.6 + 0.1) / 3)
    rho1 = math.exp((0.6 - 0.4) / 2)
    assert loss.item() == pytest.approx((-1.0 * rho0 + 2.0 * rho1) / 2, rel=1e-6)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(2 / 5)  # row 0's two clipped tokens, A > 0
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(2 / 5)
    assert metrics["actor/ppo_kl"] == pytest.approx(-(0.6 - 0.6 + 0.1 + 0.6 - 0.6) / 5, abs=1e-6)
    loss.backward()
    # gradient only where the raw log-ratio is used: ∂/∂Δ_t = −Ā·ρ/(|y|·B)
    expected = torch.tensor([[0.0, -rho0 / 3 / 2, -rho0 / 3 / 2], [2.0 * rho1 / 2 / 2, 0.0, 0.0]])
    assert torch.allclose(log_prob.grad, expected, atol=1e-6)


def test_gmpo_ignores_loss_agg_mode() -> None:
    loss = _loss()[0]
    for mode in ("seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        assert torch.equal(_loss(mode)[0], loss)


def test_gmpo_rollout_weights_enter_as_a_geometric_mean() -> None:
    log_prob = OLD + DELTA
    weights = torch.tensor([[2.0, 0.5, 1.0], [4.0, 1.0, 123.0]])
    plain, _ = geo_mean_policy_loss(OLD, log_prob, ADV, MASK, "token-mean", CONFIG)
    weighted, _ = geo_mean_policy_loss(OLD, log_prob, ADV, MASK, "token-mean", CONFIG, rollout_is_weights=weights)
    rho0, rho1 = math.exp(-0.1 / 3), math.exp(0.1)
    assert plain.item() == pytest.approx((-rho0 + 2 * rho1) / 2, rel=1e-6)
    assert weighted.item() == pytest.approx(
        (-rho0 * 1.0 + 2 * rho1 * 2.0) / 2, rel=1e-6
    )  # (2·0.5·1)^(1/3), (4·1)^(1/2)


def test_registration() -> None:
    assert load_plugins().registry.get("policy_loss", "geo_mean").dist == "rlcore-plugin-gmpo"


def test_hooks_module_does_not_import_torch() -> None:
    code = "import sys, rlcore_plugin_gmpo.hooks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestGMPOLossContract(PolicyLossContract):
    """The ``geo_mean`` loss passes the policy-loss contract (with verl's example clip range 0.4)."""

    component_name = "geo_mean"
    config_overrides = {"actor_rollout_ref.actor.clip_ratio_low": 0.4, "actor_rollout_ref.actor.clip_ratio_high": 0.4}


def test_gmpo_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps of the tiny task with GRPO advantages and the GMPO loss."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.policy_loss.loss_mode=geo_mean",
        "actor_rollout_ref.actor.clip_ratio_low=0.4",
        "actor_rollout_ref.actor.clip_ratio_high=0.4",
    )
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"]) and "actor/pg_clipfrac_lower" in last
