"""Hand-computed GSPO losses (sequence ratio, clipping, masked middle tokens, forced aggregation), its
gradient, the preset, the contracts and a short real run with ``--preset gspo``."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rlcore_plugin_gspo.loss import gspo_policy_loss
from rlcore_testkit.contracts import PolicyLossContract, PresetContract
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.api import ActorConfig
from rlcore.config import load_config
from rlcore.plugins import load_plugins

# Row 0: Δ = [0.1, 0.3] (+ padding), A = 1: s = e^0.2 = 1.2214 is clipped to 1.2 -> token loss -1.2.
# Row 1: Δ = [-0.1, (masked), -0.05], A = -0.5: s = e^-0.075 = 0.92774 -> token loss 0.46387 (not clipped).
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -1.0, -0.7]])
DELTA = torch.tensor([[0.1, 0.3, 9.0], [-0.1, 5.0, -0.05]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
ADV = torch.tensor([[1.0, 1.0, 0.0], [-0.5, -0.5, -0.5]])
CONFIG = ActorConfig(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2)


def _loss(
    delta: torch.Tensor = DELTA, mode: str = "seq-mean-token-mean", config: ActorConfig = CONFIG
) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
    """The GSPO loss, its metrics and the log-prob leaf of the example."""
    log_prob = (OLD + delta).requires_grad_(True)
    loss, metrics = gspo_policy_loss(OLD, log_prob, ADV, MASK, mode, config)
    return loss, metrics, log_prob


def test_gspo_hand_computed() -> None:
    loss, metrics, _ = _loss()
    row1 = 0.5 * math.exp(-0.075)
    assert loss.item() == pytest.approx((-1.2 + row1) / 2, abs=1e-6)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(0.5)  # both valid tokens of row 0
    assert metrics["actor/ppo_kl"] == pytest.approx(-(0.1 + 0.3 - 0.1 - 0.05) / 4)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # token losses: row 0 = [-1.2, -1.2], row 1 = [r1, r1] (valid tokens only), r1 = 0.5·e^-0.075
        ("token-mean", (-2.4 + 2 * 0.5 * math.exp(-0.075)) / 4),
        ("seq-mean-token-sum", (-2.4 + 2 * 0.5 * math.exp(-0.075)) / 2),
        ("seq-mean-token-mean", (-1.2 + 0.5 * math.exp(-0.075)) / 2),
        ("seq-mean-token-sum-norm", (-2.4 + 2 * 0.5 * math.exp(-0.075)) / 2 / 3),  # / padded R = 3
    ],
)
def test_gspo_honours_loss_agg_mode(mode: str, expected: float) -> None:
    """``loss_agg_mode`` reaches ``agg_loss`` (issue 20; verl v0.9.0 forces seq-mean-token-mean there)."""
    assert _loss(mode=mode)[0].item() == pytest.approx(expected, abs=1e-6)
    assert _loss(mode=mode, config=dataclasses.replace(CONFIG, loss_scale_factor=6.0))[0].item() == pytest.approx(
        expected * (3 / 6 if mode == "seq-mean-token-sum-norm" else 1.0), abs=1e-6
    )


def test_gspo_ignores_masked_tokens() -> None:
    loss, _, _ = _loss()
    noisy = DELTA.clone()
    noisy[1, 1] = -40.0  # the masked middle token's log-ratio does not enter the sequence ratio
    noisy[0, 2] = 40.0
    assert torch.allclose(_loss(noisy)[0], loss)


def test_gspo_gradient_is_the_sequence_level_gradient() -> None:
    """Inside the clip range, ∂L/∂logπ_t = −A_i·s_i / (|y_i|·N) at every valid token of sequence i."""
    wide = ActorConfig(clip_ratio_low=0.9, clip_ratio_high=9.0)
    loss, _, log_prob = _loss(config=wide)
    loss.backward()
    s = torch.tensor([math.exp(0.2), math.exp(-0.075)])
    per_token = -torch.tensor([1.0, -0.5]) * s / (MASK.sum(-1) * 2)
    assert torch.allclose(log_prob.grad, per_token.unsqueeze(1) * MASK, atol=1e-6)


def test_gspo_clipped_sequence_gets_no_gradient() -> None:
    loss, _, log_prob = _loss()
    loss.backward()
    assert (log_prob.grad[0] == 0).all()  # s = 1.22 > 1.2 with A > 0
    assert (log_prob.grad[1, [0, 2]] != 0).all() and log_prob.grad[1, 1] == 0


def test_gspo_preset_values() -> None:
    cfg = load_config(presets=["gspo"])
    actor = cfg.actor_rollout_ref.actor
    assert actor.policy_loss.loss_mode == "gspo"
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (3e-4, 4e-4)
    assert actor.loss_agg_mode == "seq-mean-token-mean" and actor.use_kl_loss is False
    assert cfg.algorithm.adv_estimator == "grpo"


def test_registration() -> None:
    registry = load_plugins().registry
    assert registry.get("policy_loss", "gspo").dist == "rlcore-plugin-gspo"
    assert registry.get("preset", "gspo").dist == "rlcore-plugin-gspo"


def test_hooks_module_does_not_import_torch() -> None:
    code = "import sys, rlcore_plugin_gspo.hooks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestGSPOLossContract(PolicyLossContract):
    """The GSPO loss passes the policy-loss contract (with the preset's clip range)."""

    component_name = "gspo"
    config_overrides = {"actor_rollout_ref.actor.clip_ratio_low": 3e-4, "actor_rollout_ref.actor.clip_ratio_high": 4e-4}


class TestGSPOPresetContract(PresetContract):
    """The ``gspo`` preset passes the preset contract."""

    component_name = "gspo"


def test_gspo_preset_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps of the tiny task with ``--preset gspo``."""
    task = make_tiny_task(tmp_path / "task")
    last, run_dir = tiny_run(tmp_path, tiny_model_dir, task, presets=("gspo",))
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"])
    assert "loss_mode: gspo" in (run_dir / "config.yaml").read_text()
