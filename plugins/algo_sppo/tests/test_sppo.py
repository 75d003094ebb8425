"""Hand-computed SPPO advantages (the batch soft-mean baseline) and losses (squared sequence log-ratio error),
the declared keys, the preset, the registration, the contracts and a short real run with ``--preset sppo``."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rlcore_plugin_sppo.config import SPPOActorConfig, SPPOAlgorithmConfig
from rlcore_plugin_sppo.sppo import compute_sppo_advantage, softmean, sppo_policy_loss
from rlcore_testkit.contracts import AdvantageEstimatorContract, PolicyLossContract, PresetContract
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.config import load_config
from rlcore.plugins import load_plugins

REWARDS = torch.tensor([[0.0, 1.0], [0.0, 0.0], [3.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])


def test_softmean() -> None:
    x = torch.tensor([1.0, 0.0, 3.0], dtype=torch.float64)
    assert softmean(x, 1.0).item() == pytest.approx(math.log((math.e + 1 + math.e**3) / 3))
    assert softmean(x, 2.0).item() == pytest.approx(math.log((math.e**2 + 1 + math.e**6) / 3) / 2)
    assert softmean(x, 0.0).item() == pytest.approx(4 / 3)


def test_sppo_advantage_uses_the_whole_batch() -> None:
    """verl's recipe: A_i = r_i − SoftMean_β(r) over every response of the batch, ignoring the prompt groups."""
    adv, returns = compute_sppo_advantage(
        token_level_rewards=REWARDS, response_mask=MASK, index=["a", "a", "b"], config=SPPOAlgorithmConfig(sppo_eta=1.0)
    )
    baseline = math.log((math.e + 1 + math.e**3) / 3)
    expected = torch.tensor([1.0 - baseline, -baseline, 3.0 - baseline]).unsqueeze(-1) * MASK
    assert torch.allclose(adv, expected, atol=1e-6) and torch.equal(adv, returns)


def test_sppo_loss_hand_computed() -> None:
    old = torch.tensor([[-1.0, -2.0], [-0.5, -0.5], [-1.0, -7.0]])
    delta = torch.tensor([[0.1, 0.2], [-0.3, 0.0], [0.5, 9.0]])  # row 2's second token is padding
    adv = torch.tensor([[0.5, 0.5], [-1.0, -1.0], [2.0, 0.0]])
    log_prob = (old + delta).requires_grad_(True)
    loss, metrics = sppo_policy_loss(old, log_prob, adv, MASK, "token-mean", SPPOActorConfig(sppo_eta=2.0))
    errors = [0.3 - 2.0 * 0.5, -0.3 - 2.0 * -1.0, 0.5 - 2.0 * 2.0]
    assert loss.item() == pytest.approx(sum(e * e for e in errors) / 3, rel=1e-6)
    assert metrics["actor/sppo_log_ratio"] == pytest.approx((0.3 - 0.3 + 0.5) / 3, rel=1e-6)
    assert metrics["actor/sppo_target"] == pytest.approx(2.0 * (0.5 - 1.0 + 2.0) / 3, rel=1e-6)
    loss.backward()
    expected = torch.tensor([[errors[0]] * 2, [errors[1]] * 2, [errors[2], 0.0]]) * 2 / 3
    assert torch.allclose(log_prob.grad, expected * MASK, atol=1e-6)


def test_sppo_keys_and_preset() -> None:
    cfg = load_config(presets=["sppo"], overrides=["algorithm.sppo_eta=0.5"])
    assert cfg.algorithm.sppo_eta == 0.5 and cfg.actor_rollout_ref.actor.sppo_eta == 1.0
    assert cfg.algorithm.adv_estimator == "sppo"
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "sppo"
    assert cfg.actor_rollout_ref.actor.use_kl_loss is False


def test_registration() -> None:
    registry = load_plugins().registry
    for kind in ("advantage_estimator", "policy_loss", "preset"):
        assert registry.get(kind, "sppo").dist == "rlcore-plugin-sppo"


def test_hooks_module_does_not_import_torch() -> None:
    code = "import sys, rlcore_plugin_sppo.hooks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestSPPOEstimatorContract(AdvantageEstimatorContract):
    """The SPPO estimator passes the estimator contract; its baseline is the batch's, so it is not group-relative."""

    component_name = "sppo"
    group_relative = False


class TestSPPOLossContract(PolicyLossContract):
    """The SPPO loss passes the policy-loss contract; its value is a squared error (≥ 0), so the two sign tests
    check the direction of the gradient instead."""

    component_name = "sppo"
    value_signed_by_advantage = False


class TestSPPOPresetContract(PresetContract):
    """The ``sppo`` preset passes the preset contract."""

    component_name = "sppo"


def test_sppo_preset_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps of the tiny task with ``--preset sppo``."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(tmp_path, tiny_model_dir, task, presets=("sppo",))
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"]) and "actor/sppo_target" in last
