"""Hand-computed Clip-Cov and KL-Cov losses (covariance selection, masked middle tokens, the corrected KL-Cov
k), the random subset, the registration, the loss contracts and short real runs."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_plugin_entropy.losses import clip_cov_policy_loss, kl_cov_policy_loss, random_subset, token_covariance
from rlcore_testkit.contracts import PolicyLossContract
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.api import ActorConfig
from rlcore.config.sections.actor import PolicyLossConfig
from rlcore.errors import RLCoreError
from rlcore.plugins import load_plugins

# Two responses of R = 3; row 1 has a masked (tool) token at t = 1. Five valid tokens.
# mean A = (3·2 − 2·2)/5 = 0.4; mean logπ = −7.6/5 = −1.52; cov = (A − 0.4)(logπ + 1.52):
#   row 0: [2.272, −2.368, 2.112]    row 1: [−2.928, —, 5.952]
# Only row 0, t = 0 moves (Δ = 0.3, ratio 1.35 > 1.2 with A > 0: PPO clips it).
ADV = torch.tensor([[2.0, 2.0, 2.0], [-2.0, 50.0, -2.0]])
LOG_PROB = torch.tensor([[-0.1, -3.0, -0.2], [-0.3, 7.0, -4.0]])
DELTA = torch.tensor([[0.3, 0.0, 0.0], [0.0, 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]])
COV = torch.tensor([[2.272, -2.368, 2.112], [-2.928, 0.0, 5.952]])


def _config(**policy_loss: float) -> ActorConfig:
    """A typed actor section with the default clip range and the given ``policy_loss`` options."""
    return ActorConfig(
        clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, policy_loss=PolicyLossConfig(**policy_loss)
    )


def _run(
    loss_fn: Callable[..., Any], config: ActorConfig, mode: str = "token-mean"
) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
    """Loss, metrics and the log-prob leaf of the example."""
    log_prob = LOG_PROB.clone().requires_grad_(True)
    loss, metrics = loss_fn(LOG_PROB - DELTA, log_prob, ADV, MASK, mode, config)
    return loss, metrics, log_prob


def test_token_covariance() -> None:
    cov = token_covariance(ADV, LOG_PROB, MASK)
    assert torch.allclose(cov[MASK.bool()], COV[MASK.bool()], atol=1e-5)


def test_clip_cov_hand_computed() -> None:
    """Candidates: 1 < cov < 5 and not clipped by PPO -> only row 0, t = 2 (row 0, t = 0 is PPO-clipped,
    row 1, t = 2 is above the upper bound); max(1, int(0.1·5)) = 1 token is detached."""
    loss, metrics, log_prob = _run(clip_cov_policy_loss, _config(clip_cov_ratio=0.1, clip_cov_lb=1.0, clip_cov_ub=5.0))
    assert loss.item() == pytest.approx((-2.4 - 2.0 + 0.0 + 2.0 + 2.0) / 5)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(1 / 5)
    assert metrics["actor/clip_cov_frac"] == pytest.approx(1 / 5)
    assert metrics["actor/ppo_kl"] == pytest.approx(-0.3 / 5)
    loss.backward()
    expected = torch.tensor([[0.0, -2.0, 0.0], [2.0, 0.0, 2.0]]) / 5  # clipped, detached and masked tokens: 0
    assert torch.allclose(log_prob.grad, expected, atol=1e-6)


def test_clip_cov_without_candidates_is_ppo_without_dual_clip() -> None:
    loss, metrics, _ = _run(clip_cov_policy_loss, _config(clip_cov_ratio=0.1, clip_cov_lb=10.0, clip_cov_ub=20.0))
    assert loss.item() == pytest.approx((-2.4 - 2.0 - 2.0 + 2.0 + 2.0) / 5)
    assert metrics["actor/clip_cov_frac"] == 0.0


def test_kl_cov_hand_computed() -> None:
    """k = int(5·0.4) = 2: the top-covariance tokens row 1, t = 2 (Δ = 0) and row 0, t = 0 (Δ = 0.3) add |Δ|."""
    loss, metrics, log_prob = _run(kl_cov_policy_loss, _config(kl_cov_ratio=0.4, ppo_kl_coef=1.0))
    first = -2.0 * math.exp(0.3) + 0.3
    assert loss.item() == pytest.approx((first - 2.0 - 2.0 + 2.0 + 2.0) / 5)
    assert metrics["actor/kl_cov_frac"] == pytest.approx(2 / 5)
    loss.backward()
    expected = torch.tensor([[-2.0 * math.exp(0.3) + 1.0, -2.0, -2.0], [2.0, 0.0, 2.0]]) / 5
    assert torch.allclose(log_prob.grad, expected, atol=1e-6)


def test_kl_cov_k_is_the_fraction_of_valid_tokens() -> None:
    """verl computes k = min(ratio, n_valid) and then penalises max(1, ·) tokens; here k = int(n_valid·ratio),
    so 5 valid tokens at ratio 2e-4 penalise none: the loss is the plain unclipped −A·r."""
    loss, metrics, _ = _run(kl_cov_policy_loss, _config(kl_cov_ratio=2e-4, ppo_kl_coef=1.0))
    assert loss.item() == pytest.approx((-2.0 * math.exp(0.3) - 2.0 - 2.0 + 2.0 + 2.0) / 5)
    assert metrics["actor/kl_cov_frac"] == 0.0


@pytest.mark.parametrize("loss_fn", [clip_cov_policy_loss, kl_cov_policy_loss])
def test_masked_middle_token_does_not_matter(loss_fn: Callable[..., Any]) -> None:
    config = _config(clip_cov_ratio=0.1, kl_cov_ratio=0.4, ppo_kl_coef=1.0)
    loss, _, _ = _run(loss_fn, config)
    noisy = LOG_PROB.clone()
    noisy[1, 1] = -25.0
    log_prob = noisy.requires_grad_(True)
    other, _ = loss_fn(
        noisy.detach() - DELTA,
        log_prob,
        ADV * torch.tensor([[1.0, 1.0, 1.0], [1.0, -9.0, 1.0]]),
        MASK,
        "token-mean",
        config,
    )
    assert torch.allclose(loss, other)


@pytest.mark.parametrize(
    ("loss_fn", "key"), [(clip_cov_policy_loss, "clip_cov_ratio"), (kl_cov_policy_loss, "kl_cov_ratio")]
)
@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_ratio_must_be_a_fraction(loss_fn: Callable[..., Any], key: str, bad: float) -> None:
    with pytest.raises(RLCoreError, match=f"policy_loss.{key} must be in"):
        _run(loss_fn, _config(**{key: bad}))


def test_random_subset() -> None:
    candidates = torch.rand(8, 16, generator=torch.Generator().manual_seed(1)) > 0.5
    state = torch.get_rng_state()
    picked = random_subset(candidates, 5)
    assert torch.equal(torch.get_rng_state(), state)  # the global generator is untouched
    assert int(picked.sum()) == 5 and not (picked & ~candidates).any()
    assert torch.equal(picked, random_subset(candidates, 5))  # reproducible
    assert torch.equal(random_subset(candidates, 10_000), candidates)  # fewer candidates than k: all


def test_registration() -> None:
    registry = load_plugins().registry
    for name in ("clip_cov", "kl_cov"):
        assert registry.get("policy_loss", name).dist == "rlcore-plugin-entropy"


def test_hooks_module_does_not_import_torch() -> None:
    code = "import sys, rlcore_plugin_entropy.hooks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestClipCovContract(PolicyLossContract):
    """Clip-Cov passes the policy-loss contract with rlcore's defaults."""

    component_name = "clip_cov"


class TestClipCovWideContract(PolicyLossContract):
    """And with a covariance window and ratio that detach several tokens of the contract batch."""

    component_name = "clip_cov"
    config_overrides = {
        "actor_rollout_ref.actor.policy_loss.clip_cov_ratio": 0.2,
        "actor_rollout_ref.actor.policy_loss.clip_cov_lb": 0.0,
    }


class TestKLCovContract(PolicyLossContract):
    """KL-Cov passes the policy-loss contract with rlcore's defaults (k = 0 on the small contract batch)."""

    component_name = "kl_cov"


class TestKLCovRecipeContract(PolicyLossContract):
    """And with a ratio that penalises tokens of the contract batch and the recipe's coefficient."""

    component_name = "kl_cov"
    config_overrides = {
        "actor_rollout_ref.actor.policy_loss.kl_cov_ratio": 0.2,
        "actor_rollout_ref.actor.policy_loss.ppo_kl_coef": 1.0,
    }


@pytest.mark.parametrize(
    ("loss_mode", "extra"),
    [
        ("clip_cov", "actor_rollout_ref.actor.policy_loss.clip_cov_lb=0.0"),
        ("kl_cov", "actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0.1"),
    ],
)
def test_trains(loss_mode: str, extra: str, tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps of the tiny task with each loss (settings that select tokens on a tiny batch)."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}",
        extra,
    )
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"])
    assert last[f"actor/{loss_mode}_frac"] > 0
