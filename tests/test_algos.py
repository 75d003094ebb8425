"""Hand-computed checks of rlcore.algos: reductions, aggregation, KL, policy and value losses, controllers,
the actor loss and the data/timing/throughput metrics."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from rlcore_testkit.contracts.algorithms import PolicyLossContract

from rlcore.algos import (
    AdaptiveKLController,
    FixedKLController,
    agg_loss,
    apply_kl_penalty,
    build_actor_loss,
    clip_ratio_bounds,
    compute_data_metrics,
    compute_throughput_metrics,
    compute_timing_metrics,
    entropy_from_logits,
    group_ids,
    group_stats,
    kl_penalty,
    logprobs_from_logits,
    make_kl_controller,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    value_loss,
    vanilla_policy_loss,
)
from rlcore.api.batch import Batch
from rlcore.config.algorithm_names import KLPenaltyNotImplementedError
from rlcore.config.sections.actor import ActorConfig, PolicyLossConfig
from rlcore.config.sections.algorithm import KLControlConfig, PFPPOConfig
from rlcore.errors import RLCoreError
from rlcore.hookspecs import hookimpl
from rlcore.registry import UnknownComponentError


def close(actual: torch.Tensor | float, expected: float, tol: float = 1e-5) -> bool:
    """Whether a scalar tensor or float equals ``expected`` within ``tol``."""
    value = actual.detach().item() if isinstance(actual, torch.Tensor) else actual
    return abs(value - expected) <= tol


# ------------------------------------------------------------------ functional


def test_masked_sum_and_mean() -> None:
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert close(masked_sum(x, mask), 7.0)
    assert torch.equal(masked_sum(x, mask, dim=-1), torch.tensor([3.0, 4.0]))
    assert close(masked_mean(x, mask), 7.0 / 3)
    assert torch.allclose(masked_mean(x, mask, dim=-1), torch.tensor([1.5, 4.0]))
    assert close(masked_mean(x, torch.zeros_like(mask)), 0.0)
    assert torch.equal(masked_mean(x, torch.tensor([[1, 1, 1], [0, 0, 0]]), dim=-1), torch.tensor([2.0, 0.0]))


def test_masked_var_and_whiten() -> None:
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 100.0])
    mask = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0])
    assert close(masked_var(x, mask), 5.0 / 3)
    assert close(masked_var(x, mask, unbiased=False), 1.25)
    assert close(masked_var(x, torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0])), 0.0)
    expected = (x - 2.5) / math.sqrt(5.0 / 3 + 1e-8)
    assert torch.allclose(masked_whiten(x, mask)[:4], expected[:4])
    assert torch.allclose(masked_whiten(x, mask, shift_mean=False)[:4], expected[:4] + 2.5)


def test_group_ids_and_stats() -> None:
    index = ["b", "a", "b", "c", "a", "b"]
    assert group_ids(index).tolist() == [0, 1, 0, 2, 1, 0]  # first appearance order
    scores = torch.tensor([1.0, 2.0, 0.0, 0.7, 4.0, 2.0])
    stats = group_stats(scores, index)
    assert stats.n_groups == 3
    assert stats.size.tolist() == [3.0, 2.0, 3.0, 1.0, 2.0, 3.0]
    assert torch.allclose(stats.mean, torch.tensor([1.0, 3.0, 1.0, 0.7, 3.0, 1.0]))
    b_std = torch.std(torch.tensor([1.0, 0.0, 2.0])).item()  # unbiased, like torch.std
    assert torch.allclose(stats.std, torch.tensor([b_std, math.sqrt(2.0), b_std, 0.0, math.sqrt(2.0), b_std]))
    empty = group_stats(torch.zeros(0), [])
    assert empty.n_groups == 0 and empty.mean.numel() == 0
    with pytest.raises(RLCoreError, match="index"):
        group_stats(scores, index[:5])
    with pytest.raises(RLCoreError, match="1-D"):
        group_stats(scores.unsqueeze(0), index)


def test_clip_ratio_bounds() -> None:
    assert clip_ratio_bounds(None) == (0.2, 0.2)
    assert clip_ratio_bounds(ActorConfig(clip_ratio=0.1, clip_ratio_low=None, clip_ratio_high=None)) == (0.1, 0.1)
    assert clip_ratio_bounds(ActorConfig(clip_ratio=0.1, clip_ratio_low=None, clip_ratio_high=0.28)) == (0.1, 0.28)
    assert clip_ratio_bounds(ActorConfig(clip_ratio=0.1)) == (0.2, 0.2)  # the typed defaults of both bounds


def test_logprobs_and_entropy_match_explicit_formulas() -> None:
    logits = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(0)) * 3
    labels = torch.tensor([[0, 6, 3], [2, 2, 5]])
    expected = torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(logprobs_from_logits(logits, labels), expected, atol=1e-6)
    probs = torch.softmax(logits, -1)
    assert torch.allclose(entropy_from_logits(logits), -(probs * torch.log(probs)).sum(-1), atol=1e-5)
    assert logprobs_from_logits(logits.bfloat16(), labels).dtype == torch.float32
    assert entropy_from_logits(logits.bfloat16()).dtype == torch.float32


# ------------------------------------------------------------------ agg_loss

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 7.0 / 3),
        ("seq-mean-token-sum", (3.0 + 4.0) / 2),  # the empty third sequence is not counted
        ("seq-mean-token-mean", (1.5 + 4.0) / 2),
        ("seq-mean-token-sum-norm", (3.0 + 4.0) / 2 / 3),  # seq-mean-token-sum / the padded length R = 3
    ],
)
def test_agg_loss_modes(mode: str, expected: float) -> None:
    assert close(agg_loss(LOSS, MASK, mode), expected)


def test_agg_loss_scale_factor_and_errors() -> None:
    assert close(agg_loss(LOSS, MASK, "seq-mean-token-sum-norm", loss_scale_factor=7.0), 0.5)
    with pytest.raises(RLCoreError, match="token-mean, seq-mean-token-sum"):
        agg_loss(LOSS, MASK, "mean")


# ------------------------------------------------------------------ kl_penalty

LOGP = torch.tensor([-1.0, -2.0])
REF = torch.tensor([-2.0, -1.0])  # delta = logp - ref = [1, -1]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("kl", [1.0, -1.0]),
        ("k1", [1.0, -1.0]),
        ("abs", [1.0, 1.0]),
        ("mse", [0.5, 0.5]),
        ("k2", [0.5, 0.5]),
        ("low_var_kl", [math.exp(-1.0), math.e - 2.0]),  # x = -delta: e^x - x - 1
        ("k3", [math.exp(-1.0), math.e - 2.0]),
    ],
)
def test_kl_penalty_values(kind: str, expected: list[float]) -> None:
    assert torch.allclose(kl_penalty(LOGP, REF, kind), torch.tensor(expected))


def test_low_var_kl_clamps() -> None:
    logp = torch.tensor([-30.0, 30.0, -3.0, 0.0])
    value = kl_penalty(logp, torch.zeros(4), "k3")
    # x = 30 -> clamp 20 -> e^20 - 21 -> clamp 10; x = -30 -> -20 -> e^-20 + 19 -> clamp 10; x = 3 -> e^3 - 4 -> 10
    assert torch.allclose(value, torch.tensor([10.0, 10.0, 10.0, 0.0]))
    assert close(kl_penalty(torch.tensor(-2.0), torch.tensor(0.0), "k3"), math.exp(2.0) - 3.0)


@pytest.mark.parametrize("base", ["kl", "abs", "k3", "low_var_kl", "k2"])
def test_straight_through_value_of_base_gradient_of_k2(base: str) -> None:
    logp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    ref = torch.tensor([-2.0, -1.0, -0.5], requires_grad=True)
    value = kl_penalty(logp, ref, base + "+")
    assert torch.allclose(value.detach(), kl_penalty(logp.detach(), ref.detach(), base))
    value.sum().backward()
    delta = (logp - ref).detach()
    assert torch.allclose(logp.grad, delta)  # d(½Δ²)/dlogp = Δ
    assert torch.allclose(ref.grad, -delta)


def test_kl_penalty_errors() -> None:
    for kind in ("full", "full+"):
        with pytest.raises(KLPenaltyNotImplementedError):
            kl_penalty(LOGP, REF, kind)
    assert issubclass(KLPenaltyNotImplementedError, NotImplementedError)
    with pytest.raises(RLCoreError, match="low_var_kl"):
        kl_penalty(LOGP, REF, "k4")


# ------------------------------------------------------------------ vanilla policy loss

# per token: (advantage, ratio, expected token loss)
CASES = [
    (1.0, 1.5, -1.2),  # upper clip: max(-1.5, -1.2)
    (1.0, 0.5, -0.5),  # no clip: max(-0.5, -0.8)
    (-1.0, 1.5, 1.5),  # no clip: max(1.5, 1.2), under the dual bound 3
    (-1.0, 0.5, 0.8),  # lower clip: max(0.5, 0.8)
    (-1.0, 4.0, 3.0),  # dual clip: min(max(4, 1.2), 3)
    (2.0, 1.0, -2.0),  # ratio one
]


def _policy_inputs(cases=CASES):
    """Row tensors ``old, log_prob, advantages, mask`` for ``cases``."""
    adv = torch.tensor([[c[0] for c in cases]])
    old = torch.full_like(adv, -1.0)
    log_prob = (old + torch.log(torch.tensor([[c[1] for c in cases]]))).requires_grad_(True)
    return old, log_prob, adv, torch.ones_like(adv)


def test_vanilla_loss_clip_and_dual_clip() -> None:
    old, log_prob, adv, mask = _policy_inputs()
    config = ActorConfig(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0)
    loss, metrics = vanilla_policy_loss(old, log_prob, adv, mask, "token-mean", config)
    assert close(loss, sum(c[2] for c in CASES) / 6)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(2 / 6)
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(1 / 6)
    log_ratios = [math.log(c[1]) for c in CASES]
    assert metrics["actor/ppo_kl"] == pytest.approx(-sum(log_ratios) / 6, abs=1e-6)
    assert all(type(v) is float for v in metrics.values())
    loss.backward()
    # unclipped tokens: d(-A r)/dlogp = -A r / N; clipped and dual-clipped tokens: 0
    expected_grad = [0.0, -0.5 / 6, 1.5 / 6, 0.0, 0.0, -2.0 / 6]
    assert torch.allclose(log_prob.grad, torch.tensor([expected_grad]), atol=1e-6)


def test_vanilla_loss_asymmetric_clip_and_fallback() -> None:
    old, log_prob, adv, mask = _policy_inputs(CASES[:4])
    asymmetric = ActorConfig(clip_ratio_low=0.1, clip_ratio_high=0.3)
    loss, _ = vanilla_policy_loss(old, log_prob, adv, mask, "token-mean", asymmetric)
    assert close(loss, (-1.3 - 0.5 + 1.5 + 0.9) / 4)
    loss, _ = vanilla_policy_loss(
        old, log_prob, adv, mask, "token-mean", ActorConfig(clip_ratio=0.1, clip_ratio_low=None, clip_ratio_high=None)
    )
    assert close(loss, (-1.1 - 0.5 + 1.5 + 0.9) / 4)
    loss, _ = vanilla_policy_loss(old, log_prob, adv, mask)  # defaults: 0.2 both sides
    assert close(loss, (-1.2 - 0.5 + 1.5 + 0.8) / 4)


def test_vanilla_loss_weights_masks_and_agg() -> None:
    old, log_prob, adv, mask = _policy_inputs()
    base, _ = vanilla_policy_loss(old, log_prob, adv, mask)
    weighted, _ = vanilla_policy_loss(old, log_prob, adv, mask, rollout_is_weights=torch.full_like(adv, 2.0))
    assert close(weighted, 2 * base.item())
    half = torch.tensor([[1.0, 1.0, 1.0, 0.0, 0.0, 0.0]])
    loss, metrics = vanilla_policy_loss(old, log_prob, adv, half, "seq-mean-token-sum")
    assert close(loss, -1.2 - 0.5 + 1.5)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(1 / 3)
    loss, _ = vanilla_policy_loss(
        old, log_prob, adv, mask, "seq-mean-token-sum-norm", ActorConfig(loss_scale_factor=2.0)
    )
    assert close(loss, sum(c[2] for c in CASES) / 2)


def test_vanilla_loss_ratio_is_clamped() -> None:
    old = torch.zeros(1, 2)
    log_prob = torch.tensor([[50.0, -50.0]])
    adv = torch.tensor([[-1.0, 1.0]])
    loss, _ = vanilla_policy_loss(old, log_prob, adv, torch.ones(1, 2), config=ActorConfig(clip_ratio_c=1e12))
    assert close(loss, math.exp(20.0) / 2, tol=1e2)  # e^20 (dual bound 1e12 inactive) and ~0


def test_vanilla_loss_rejects_clip_ratio_c_at_most_one() -> None:
    old, log_prob, adv, mask = _policy_inputs()
    with pytest.raises(RLCoreError, match="clip_ratio_c"):
        vanilla_policy_loss(old, log_prob, adv, mask, config=ActorConfig(clip_ratio_c=1.0))


class TestVanillaContract(PolicyLossContract):
    """rlcore's own policy loss passes the policy-loss contract."""

    component_name = "vanilla"


# ------------------------------------------------------------------ value loss


def test_value_loss_hand_computed() -> None:
    vpreds = torch.tensor([[1.0, 2.0, 3.0, 9.0]])
    values = torch.tensor([[0.0, 2.0, 2.0, 0.0]])
    returns = torch.tensor([[0.5, 3.0, 4.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    # token 0: clip 0.5 -> max(0.25, 0); token 1: max(1, 1); token 2: clip 2.5 -> max(1, 2.25) (clipped)
    loss, clipfrac = value_loss(vpreds, returns, values, mask, 0.5, "token-mean")
    assert close(loss, 0.5 * (0.25 + 1.0 + 2.25) / 3)
    assert clipfrac == pytest.approx(1 / 3)
    loss, _ = value_loss(vpreds, returns, values, mask, 0.5, "seq-mean-token-sum")
    assert close(loss, 0.5 * 3.5)


# ------------------------------------------------------------------ KL controllers


def test_kl_controllers() -> None:
    fixed = FixedKLController(0.05)
    fixed.update(10.0, 100)
    assert fixed.value == 0.05
    adaptive = AdaptiveKLController(init_kl_coef=0.1, target_kl=0.1, horizon=100)
    adaptive.update(0.15, n_steps=10)  # error 0.5 clipped to 0.2
    assert adaptive.value == pytest.approx(0.1 * (1 + 0.2 * 10 / 100))
    adaptive.update(0.09, n_steps=10)  # error -0.1
    assert adaptive.value == pytest.approx(0.102 * (1 - 0.1 * 10 / 100))


def test_make_kl_controller() -> None:
    ctrl = make_kl_controller(KLControlConfig(type="adaptive", kl_coef=0.2, horizon=50, target_kl=0.5))
    assert isinstance(ctrl, AdaptiveKLController) and ctrl.value == 0.2 and ctrl.horizon == 50
    assert isinstance(make_kl_controller(KLControlConfig(type="fixed", kl_coef=0.3)), FixedKLController)
    with pytest.raises(RLCoreError, match=r"algorithm\.kl_ctrl\.type"):
        make_kl_controller(KLControlConfig(type="pid"))
    with pytest.raises(RLCoreError, match=r"algorithm\.kl_ctrl\.horizon"):
        make_kl_controller(KLControlConfig(type="adaptive", horizon=0))


def test_apply_kl_penalty() -> None:
    scores = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    old = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -1.0, 5.0]])
    ref = torch.tensor([[-2.0, -1.0, -1.0], [-1.0, -1.5, -1.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    ctrl = AdaptiveKLController(0.1, target_kl=0.1, horizon=10)
    rewards, metrics = apply_kl_penalty(scores, old, ref, mask, ctrl, "kl")
    assert torch.allclose(rewards, torch.tensor([[-0.1, 0.0, 1.0], [0.0, 0.95, 0.0]]))
    current = (1.0 / 3 + 0.5 / 2) / 2
    assert metrics == {"actor/reward_kl_penalty": pytest.approx(current), "actor/reward_kl_penalty_coeff": 0.1}
    assert ctrl.value == pytest.approx(0.1 * (1 + 0.2 * 2 / 10))


# ------------------------------------------------------------------ actor loss


def _micro_batch(**extra: torch.Tensor) -> Batch:
    """The vanilla CASES as a one-row micro-batch, plus ``extra`` tensors."""
    old, _, adv, mask = _policy_inputs()
    return Batch.from_dict({"old_log_probs": old, "advantages": adv, "response_mask": mask, **extra})


def _actor_config(**overrides: Any) -> ActorConfig:
    """The typed ``actor_rollout_ref.actor`` section with ``overrides`` (``policy_loss``: its loss mode)."""
    mode = overrides.pop("policy_loss", PolicyLossConfig.loss_mode)
    return ActorConfig(
        clip_ratio_low=None, clip_ratio_high=None, policy_loss=PolicyLossConfig(loss_mode=mode), **overrides
    )


def test_actor_loss_policy_only() -> None:
    _, log_prob, _, _ = _policy_inputs()
    loss, metrics = build_actor_loss(_actor_config())(log_prob, None, _micro_batch())
    expected = sum(c[2] for c in CASES) / 6
    assert close(loss, expected)
    assert metrics["actor/pg_loss"] == pytest.approx(expected)
    assert {"actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl"} <= set(metrics)
    assert "actor/kl_loss" not in metrics


def test_actor_loss_entropy_kl_and_weights() -> None:
    _, log_prob, _, _ = _policy_inputs()
    ref = torch.full_like(log_prob, -1.0)
    entropy = torch.arange(6.0).unsqueeze(0)
    config = _actor_config(entropy_coeff=0.01, use_kl_loss=True, kl_loss_coef=0.1, kl_loss_type="k2")
    weights = torch.full_like(ref, 2.0)
    micro_batch = _micro_batch(ref_log_prob=ref, rollout_is_weights=weights)
    loss, metrics = build_actor_loss(config)(log_prob, entropy, micro_batch)
    pg = 2 * sum(c[2] for c in CASES) / 6
    kl = sum(0.5 * math.log(c[1]) ** 2 for c in CASES) / 6
    assert close(loss, pg - 0.01 * 2.5 + 0.1 * kl)
    assert metrics["actor/kl_loss"] == pytest.approx(kl)
    assert metrics["actor/kl_coef"] == 0.1
    loss.backward()
    assert log_prob.grad is not None


def test_actor_loss_errors() -> None:
    _, log_prob, _, _ = _policy_inputs()
    with pytest.raises(UnknownComponentError, match=r"policy_loss\.loss_mode.*'vanila'.*vanilla"):
        build_actor_loss(_actor_config(policy_loss="vanila"))
    with pytest.raises(RLCoreError, match=r"actor\.kl_loss_type"):
        build_actor_loss(_actor_config(use_kl_loss=True, kl_loss_type="k9"))
    with pytest.raises(RLCoreError, match=r"actor\.loss_agg_mode"):
        build_actor_loss(_actor_config(loss_agg_mode="sum"))
    with pytest.raises(RLCoreError, match="ref_log_prob"):
        build_actor_loss(_actor_config(use_kl_loss=True))(log_prob, None, _micro_batch())
    with pytest.raises(RLCoreError, match="entropy_coeff"):
        build_actor_loss(_actor_config(entropy_coeff=0.1))(log_prob, None, _micro_batch())


def _constant_loss(old, log_prob, adv, mask, mode, config, rollout_is_weights=None):
    """A policy loss of 42 that still depends on ``log_prob``."""
    return log_prob.sum() * 0 + 42.0, {"x/y": 1.0}


class _ConstantLossPlugin:
    """A plugin registering a policy loss that ignores its inputs except for the gradient path."""

    @hookimpl
    def register_policy_losses(self, register):
        """Register ``constant``."""
        register("constant", _constant_loss)


def test_actor_loss_resolves_registered_policy_loss(registered) -> None:
    _, log_prob, _, _ = _policy_inputs()
    with registered(_ConstantLossPlugin()):
        loss_fn = build_actor_loss(_actor_config(policy_loss="constant"))
        loss, metrics = loss_fn(log_prob, None, _micro_batch())
    assert close(loss, 42.0)
    assert metrics == {"x/y": 1.0, "actor/pg_loss": 42.0}


# ------------------------------------------------------------------ metrics


def _metrics_batch() -> Batch:
    """Two samples, P = 3 (left-padded prompts), R = 4 (right-padded responses)."""
    advantages = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 0.0, 0.0]])
    response_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    returns = advantages + 1.0
    residual = torch.tensor([[1.0, -1.0, 1.0, -1.0], [1.0, -1.0, 0.0, 0.0]])
    return Batch.from_dict(
        {
            "prompts": torch.tensor([[0, 5, 6], [7, 8, 9]]),
            "responses": torch.tensor([[1, 2, 3, 4], [1, 2, 0, 0]]),
            "attention_mask": torch.tensor([[0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]]),
            "response_mask": response_mask,
            "token_level_scores": torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.0, 0.5, 0.0, 0.0]]),
            "token_level_rewards": torch.tensor([[-0.1, 0.0, 0.0, 1.0], [0.0, 0.5, 0.0, 0.0]]),
            "advantages": advantages,
            "returns": returns,
            "values": returns - residual,
        }
    )


def test_compute_data_metrics() -> None:
    metrics = compute_data_metrics(_metrics_batch(), use_critic=True)
    expected = {
        "critic/score/mean": 0.75, "critic/score/max": 1.0, "critic/score/min": 0.5,
        "critic/rewards/mean": 0.7, "critic/rewards/max": 0.9, "critic/rewards/min": 0.5,
        "critic/advantages/mean": 3.5, "critic/advantages/max": 6.0, "critic/advantages/min": 1.0,
        "critic/returns/mean": 4.5, "critic/returns/max": 7.0, "critic/returns/min": 2.0,
        "critic/values/mean": 4.5, "critic/values/max": 8.0, "critic/values/min": 1.0,
        "critic/vf_explained_var": 1.0 - 1.2 / (3.5 + 1e-5),
        "response_length/mean": 3.0, "response_length/max": 4.0, "response_length/min": 2.0,
        "response_length/clip_ratio": 0.5,
        "prompt_length/mean": 2.5, "prompt_length/max": 3.0, "prompt_length/min": 2.0,
        "prompt_length/clip_ratio": 0.5,
    }  # fmt: skip
    assert metrics == pytest.approx(expected)
    assert all(type(v) is float for v in metrics.values())
    without_critic = compute_data_metrics(_metrics_batch(), use_critic=False)
    assert not any(k.startswith("critic/values") or k == "critic/vf_explained_var" for k in without_critic)


def test_timing_and_throughput_metrics() -> None:
    metrics = compute_timing_metrics({"gen": 2.0, "update_actor": 1.0}, n_prompt_tokens=500, n_response_tokens=1500)
    assert metrics == pytest.approx(
        {
            "timing_s/gen": 2.0,
            "timing_s/update_actor": 1.0,
            "timing_per_token_ms/gen": 2000.0 / 1500,
            "timing_per_token_ms/update_actor": 1000.0 / 2000,
        }
    )
    assert compute_throughput_metrics(1000, 2.0, 2) == {
        "perf/total_num_tokens": 1000.0,
        "perf/time_per_step": 2.0,
        "perf/throughput": 250.0,
    }


# ------------------------------------------------------------------ PF-PPO (algorithm.use_pf_ppo)


def test_pf_ppo_weights_hand_computed() -> None:
    from rlcore.algos.pf_ppo import pf_ppo_weights

    scores = torch.tensor([1.0, -2.0, 0.0, 3.0])
    assert pf_ppo_weights(scores, "pow", 2.0).tolist() == pytest.approx([1.0, 4.0, 1e-8, 9.0])
    assert pf_ppo_weights(scores, "max_min", 2.0).tolist() == pytest.approx([1e-8, 1.0, 1e-8, 1.0])
    assert pf_ppo_weights(scores, "max_random", 2.0).tolist() == pytest.approx([0.1, 0.1, 0.1, 0.4])


def test_pf_ppo_resample_follows_the_weights() -> None:
    from rlcore.algos.pf_ppo import pf_ppo_resample

    scores = torch.zeros(4, 2)
    scores[:, -1] = torch.tensor([0.0, 1.0, 0.0, 1.0])  # max_min keeps only rows 1 and 3 (and 0/2 at weight 1e-8)
    batch = Batch.from_dict({"token_level_scores": scores, "uid": np.array(list("abcd"), dtype=object)})
    section = PFPPOConfig(reweight_method="max_min", weight_pow=2.0)
    resampled, metrics = pf_ppo_resample(batch, PFPPOConfig(reweight_method="pow", weight_pow=2.0), seed=3)
    assert len(resampled) == 4 and set(resampled["uid"]) <= {"b", "d"}  # |0|^2 weights are 1e-8
    assert metrics["pf_ppo/score_mean"] == 1.0
    again, _ = pf_ppo_resample(batch, section, seed=3)
    assert list(again["uid"]) == list(pf_ppo_resample(batch, section, seed=3)[0]["uid"])  # seeded
    with pytest.raises(RLCoreError, match="algorithm.pf_ppo.reweight_method must be one of pow, max_min"):
        pf_ppo_resample(batch, PFPPOConfig(reweight_method="best"), seed=0)


def test_pf_ppo_trains(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps with ``algorithm.use_pf_ppo=true``: the batch is resampled after the advantages."""
    from rlcore_testkit.runs import make_tiny_task, tiny_run

    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(tmp_path, tiny_model_dir, task, "algorithm.adv_estimator=grpo", "algorithm.use_pf_ppo=true")
    assert last["training/global_step"] == 2
    assert 0.0 < last["pf_ppo/unique_frac"] <= 1.0
