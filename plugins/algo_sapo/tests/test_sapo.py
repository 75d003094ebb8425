"""Hand-computed SAPO losses (the sigmoid gate, τ by the advantage's sign, forced seq-mean-token-mean),
the keys it declares, the registration, the policy-loss contract and a short real run of the tiny task."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rlcore_plugin_sapo.config import SAPOActorConfig
from rlcore_plugin_sapo.loss import sapo_policy_loss
from rlcore_testkit.contracts import PolicyLossContract
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.config import load_config
from rlcore.errors import RLCoreError
from rlcore.plugins import load_plugins

OLD = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
RATIO = torch.tensor([[1.5, 1.0, 3.0], [0.5, 2.0, 1.0]])
ADV = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
CONFIG = SAPOActorConfig(tau_pos=1.0, tau_neg=1.05)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _gate(r: float, tau: float) -> float:
    return _sigmoid(tau * (r - 1.0)) * 4.0 / tau


def test_sapo_hand_computed() -> None:
    log_prob = (OLD + torch.log(RATIO)).requires_grad_(True)
    loss, metrics = sapo_policy_loss(OLD, log_prob, ADV, MASK, "token-mean", CONFIG)
    row0 = (-_gate(1.5, 1.0) - _gate(1.0, 1.0)) / 2
    row1 = 2.0 * (_gate(0.5, 1.05) + _gate(2.0, 1.05) + _gate(1.0, 1.05)) / 3
    assert loss.item() == pytest.approx((row0 + row1) / 2, rel=1e-6)  # seq-mean-token-mean, whatever the mode
    assert set(metrics) == {"actor/ppo_kl"}
    loss.backward()
    # ∂/∂logπ = −A·(4/τ)·τ·σ'(τ(r−1))·r / (|y|·B) = −4A·σ(1−σ)·r / (|y|·B); at r = 1, A = 1: −A / (|y|·B)
    assert log_prob.grad[0, 1].item() == pytest.approx(-1.0 / 2 / 2, rel=1e-6)
    s = _sigmoid(1.05 * (2.0 - 1.0))
    assert log_prob.grad[1, 1].item() == pytest.approx(4 * 2.0 * s * (1 - s) * 2.0 / 3 / 2, rel=1e-5)
    assert log_prob.grad[0, 2].item() == 0.0


def test_sapo_forces_seq_mean_token_mean_and_checks_tau() -> None:
    log_prob = OLD + torch.log(RATIO)
    loss, _ = sapo_policy_loss(OLD, log_prob, ADV, MASK, "token-mean", CONFIG)
    for mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        assert torch.equal(sapo_policy_loss(OLD, log_prob, ADV, MASK, mode, CONFIG)[0], loss)
    with pytest.raises(RLCoreError, match="actor_rollout_ref.actor.tau_neg must be > 0"):
        sapo_policy_loss(OLD, log_prob, ADV, MASK, "token-mean", SAPOActorConfig(tau_pos=1.0, tau_neg=0.0))


def test_sapo_keys_are_declared() -> None:
    actor = load_config(overrides=["actor_rollout_ref.actor.tau_neg=2.0"]).actor_rollout_ref.actor
    assert (actor.tau_pos, actor.tau_neg) == (1.0, 2.0)


def test_registration() -> None:
    assert load_plugins().registry.get("policy_loss", "sapo").dist == "rlcore-plugin-sapo"


def test_hooks_module_does_not_import_torch() -> None:
    code = "import sys, rlcore_plugin_sapo.hooks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestSAPOLossContract(PolicyLossContract):
    """The SAPO loss passes the policy-loss contract."""

    component_name = "sapo"


def test_sapo_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps of the tiny task with GRPO advantages and the SAPO loss (verl's example's mode)."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.policy_loss.loss_mode=sapo",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
    )
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"])
