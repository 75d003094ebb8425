"""Decoupled PPO (verl's decoupled mode of ``algorithm.rollout_correction``: ``bypass_mode=false`` with
``rollout_is``): three policies, π_behav (``rollout_log_probs``, per token the policy that sampled it), π_prox
(``old_log_probs``, recomputed by the trainer at the step's start) and π_θ. The loss clips r = π_θ/π_prox and
multiplies each token's clipped loss by the truncated behaviour weight w = min(π_prox/π_behav, threshold).
Expected values are computed here token by token with ``math``, apart from rlcore's code."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.algos.losses import build_actor_loss, vanilla_policy_loss
from rlcore.algos.rollout_correction import apply_rollout_correction, bypass_policy_loss, offpolicy_metrics
from rlcore.api.batch import Batch
from rlcore.config.sections.actor import ActorConfig
from rlcore.config.sections.algorithm import RolloutCorrectionConfig
from rlcore.errors import RLCoreError

ACTOR = ActorConfig()  # clip ratio 0.2 both sides, dual-clip c = 3, token-mean
EPS, CLIP_C = 0.2, 3.0
# one response of five tokens and one of three (two padding positions)
BEHAV = torch.tensor([[-1.2, -0.7, -2.0, -0.3, -1.5], [-0.5, -1.0, -2.0, 0.0, 0.0]])
PROX = torch.tensor([[-1.0, -0.9, -1.0, -0.3, -1.5], [-0.6, -1.0, -1.9, 0.0, 0.0]])
CURRENT = torch.tensor([[-0.8, -0.9, -1.3, -0.1, -0.1], [-0.6, -0.9, -1.9, -3.0, -3.0]])
ADV = torch.tensor([[1.0, -1.0, 2.0, -0.5, -1.0], [0.5, 1.0, -2.0, 7.0, 7.0]])
MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])


def token_loss_and_grad(current: float, prox: float, adv: float) -> tuple[float, float]:
    """PPO's clipped, dual-clipped token loss on r = exp(current − prox) and its derivative in ``current``."""
    ratio = math.exp(current - prox)
    unclipped, clipped = -adv * ratio, -adv * min(max(ratio, 1 - EPS), 1 + EPS)
    loss, grad = (unclipped, -adv * ratio) if unclipped >= clipped else (clipped, 0.0)
    if adv < 0 and loss > -adv * CLIP_C:
        loss, grad = -adv * CLIP_C, 0.0
    return loss, grad


def hand_decoupled(level: str, threshold: float) -> tuple[float, torch.Tensor]:
    """The decoupled loss (token-mean) and its gradient in the current log-probs, from the module's tensors."""
    losses, grads, count = 0.0, torch.zeros_like(CURRENT), int(MASK.sum())
    for row in range(CURRENT.shape[0]):
        valid = [t for t in range(CURRENT.shape[1]) if MASK[row, t]]
        seq_log_ratio = sum(float(PROX[row, t] - BEHAV[row, t]) for t in valid)
        for t in valid:
            log_ratio = float(PROX[row, t] - BEHAV[row, t]) if level == "token" else seq_log_ratio
            weight = min(math.exp(log_ratio), threshold)
            loss, grad = token_loss_and_grad(float(CURRENT[row, t]), float(PROX[row, t]), float(ADV[row, t]))
            losses += weight * loss / count
            grads[row, t] = weight * grad / count
    return losses, grads


def step_batch(behav: torch.Tensor = BEHAV) -> Batch:
    """A batch as the controller holds it before the rollout correction: π_prox, π_behav, mask, advantages."""
    return Batch({"old_log_probs": PROX, "rollout_log_probs": behav, "response_mask": MASK, "advantages": ADV})


def corrected_batch(correction: RolloutCorrectionConfig, behav: torch.Tensor = BEHAV) -> Batch:
    """:func:`step_batch` with the rollout correction of ``correction`` applied."""
    batch = step_batch(behav)
    apply_rollout_correction(batch, correction)
    return batch


def actor_loss(
    correction: RolloutCorrectionConfig, batch: Batch, current: torch.Tensor = CURRENT
) -> tuple[float, torch.Tensor, dict[str, float]]:
    """``(loss, d loss / d current, metrics)`` of the actor loss of ``correction`` on ``batch`` (one micro-batch)."""
    log_prob = current.clone().requires_grad_(True)
    loss, metrics = build_actor_loss(ACTOR, rollout_correction=correction)(log_prob, None, batch)
    loss.backward()
    assert log_prob.grad is not None
    return float(loss.detach()), log_prob.grad, metrics


@pytest.mark.parametrize(("level", "threshold"), [("token", 2.0), ("token", 10.0), ("sequence", 2.0)])
def test_loss_and_gradient_match_the_hand_formula(level: str, threshold: float) -> None:
    """The clipped ratio is π_θ/π_prox (token 0 is clipped above, token 4 dual-clipped) and each token's loss is
    scaled by min(π_prox/π_behav, threshold): token 2's weight e is truncated to 2; at sequence level every
    token of a response carries the response's product of ratios."""
    correction = RolloutCorrectionConfig(rollout_is=level, rollout_is_threshold=threshold)
    loss, grad, metrics = actor_loss(correction, corrected_batch(correction))
    expected_loss, expected_grad = hand_decoupled(level, threshold)
    assert loss == pytest.approx(expected_loss, rel=1e-5)
    torch.testing.assert_close(grad, expected_grad)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(1 / 8)  # token 0 only (the dual clip is counted apart)
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(1 / 8)  # token 4


@pytest.mark.parametrize(
    "correction",
    [
        RolloutCorrectionConfig(rollout_is="token"),
        RolloutCorrectionConfig(rollout_is="sequence", rollout_is_batch_normalize=True),
        RolloutCorrectionConfig(
            rollout_is="token", rollout_rs="token_k1,seq_max_k2", rollout_rs_threshold="0.9_1.1,0.01"
        ),
    ],
)
def test_behaviour_equal_to_proximal_is_standard_ppo(correction: RolloutCorrectionConfig) -> None:
    """π_behav = π_prox (an on-policy batch): every weight is 1, nothing is rejected, and the loss and its
    gradient are PPO's without correction."""
    batch = corrected_batch(correction, behav=PROX)
    torch.testing.assert_close(batch["rollout_is_weights"], MASK.float())
    assert torch.equal(batch["response_mask"], MASK)
    loss, grad, _ = actor_loss(correction, batch)
    log_prob = CURRENT.clone().requires_grad_(True)
    plain, _ = vanilla_policy_loss(PROX, log_prob, ADV, MASK, "token-mean", ACTOR)
    plain.backward()
    assert loss == pytest.approx(float(plain.detach()), rel=1e-6)
    torch.testing.assert_close(grad, log_prob.grad)


def test_first_micro_batch_equals_bypass_where_no_clip_bites() -> None:
    """Where π_θ = π_prox (the step's first micro-batch) decoupled PPO and bypass mode's PPO-clip loss (ratio
    π_θ/π_behav) have the same value and gradient, −w·A·∇logπ, as long as neither the weight is truncated nor
    the bypass ratio clipped. Token 2 (π_prox/π_behav = e^0.5 > 1.2, A > 0) shows where they part: bypass
    clips the stale token away (no gradient), decoupled PPO keeps its weighted gradient."""
    behav = torch.tensor([[-1.1, -0.8, -1.5, -0.3, -1.4], [-0.5, -1.0, -2.0, 0.0, 0.0]])
    prox = PROX
    decoupled = RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold=10.0)
    batch = corrected_batch(decoupled, behav=behav)
    d_loss, d_grad, _ = actor_loss(decoupled, batch, current=prox)
    bypass = RolloutCorrectionConfig(bypass_mode=True)
    log_prob = prox.clone().requires_grad_(True)
    b_loss, _ = bypass_policy_loss(vanilla_policy_loss, bypass)(behav, log_prob, ADV, MASK, "token-mean", ACTOR)
    b_loss.backward()
    assert log_prob.grad is not None
    weights = torch.exp(prox - behav) * MASK
    torch.testing.assert_close(d_grad, -ADV * weights / 8)
    agree = torch.ones_like(MASK, dtype=torch.bool)
    agree[0, 2] = False
    torch.testing.assert_close(d_grad[agree], log_prob.grad[agree])
    assert float(log_prob.grad[0, 2]) == 0.0 and float(d_grad[0, 2]) == pytest.approx(-2.0 * math.exp(0.5) / 8)
    # the values differ by token 2 alone: bypass's −A·1.2 against decoupled's −A·w
    assert d_loss - float(b_loss.detach()) == pytest.approx((-2.0 * math.exp(0.5) + 2.0 * 1.2) / 8, rel=1e-5)


# ------------------------------------------------------------------ responses spanning two policy versions
def two_version_batch() -> dict[str, Any]:
    """Real sampling from a tiny categorical policy (a linear layer over fixed features, vocabulary 6) in two
    versions: row 0's first three tokens come from version 0 and its last three from version 1 (a weight
    update landed mid-response), row 1 is all version 1. Each token's behaviour log-prob is the one its own
    version recorded when sampling it; the trainer's π_prox is version 1 (its weights at the step's start)."""
    generator = torch.Generator().manual_seed(7)
    features = torch.randn(2, 6, 4, generator=generator)
    version0 = torch.randn(4, 6, generator=generator)
    version1 = version0 + 1.5 * torch.randn(4, 6, generator=generator)
    versions = torch.tensor([[0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    by_version = [torch.log_softmax(features @ version, dim=-1) for version in (version0, version1)]
    sampling = torch.where(versions[..., None] == 0, by_version[0], by_version[1])
    tokens = torch.multinomial(sampling.exp().reshape(-1, 6), 1, generator=generator).reshape(2, 6)
    behav = sampling.gather(-1, tokens[..., None]).squeeze(-1)
    prox = by_version[1].gather(-1, tokens[..., None]).squeeze(-1)
    return {"versions": versions, "behav": behav, "prox": prox, "mask": torch.ones(2, 6, dtype=torch.long)}


def test_a_response_spanning_two_versions_is_corrected_token_by_token() -> None:
    """Nothing assumes one behaviour policy per response: the version-1 tokens get weight 1 exactly and are
    never rejected by a token rule, the version-0 tokens get π_prox/π_behav; the sequence weight is the
    product over the tokens (so only the version-0 span moves it); a sequence rule sees the whole response."""
    data = two_version_batch()
    stale = data["versions"] == 0
    ratio = torch.exp(data["prox"] - data["behav"])
    assert torch.equal(ratio[~stale], torch.ones(int((~stale).sum())))
    token_rule = "0.67_1.5"
    rejected = stale & ((ratio < 0.67) | (ratio > 1.5))
    assert 0 < int(rejected.sum()) < int(stale.sum())  # the data has both kinds of stale token

    def batch() -> Batch:
        return Batch({"old_log_probs": data["prox"], "rollout_log_probs": data["behav"], "response_mask": data["mask"]})

    token = batch()
    token_metrics = apply_rollout_correction(
        token,
        RolloutCorrectionConfig(
            rollout_is="token", rollout_is_threshold=1e6, rollout_rs="token_k1", rollout_rs_threshold=token_rule
        ),
    )
    torch.testing.assert_close(token["rollout_is_weights"], ratio)
    assert torch.equal(token["response_mask"].bool(), ~rejected)
    assert token_metrics["rollout_corr/rollout_rs_token_k1_seq_masked_fraction"] == 0.5  # row 0 only
    assert token_metrics["rollout_corr/rollout_rs_token_k1_masked_fraction"] == pytest.approx(int(rejected.sum()) / 12)

    sequence = batch()
    metrics = apply_rollout_correction(
        sequence,
        RolloutCorrectionConfig(
            rollout_is="sequence", rollout_is_threshold=1e6, rollout_rs="seq_max_k2", rollout_rs_threshold=0.01
        ),
    )
    product = math.prod(float(value) for value in ratio[0][stale[0]])
    torch.testing.assert_close(sequence["rollout_is_weights"][0], torch.full((6,), product))
    torch.testing.assert_close(sequence["rollout_is_weights"][1], torch.ones(6))
    assert sequence["response_mask"][0].sum() == 0 and sequence["response_mask"][1].sum() == 6
    assert metrics["rollout_corr/rollout_rs_seq_masked_fraction"] == 0.5
    assert metrics["rollout_corr/chi2_seq"] == pytest.approx((product**2 + 1) / 2 - 1, rel=1e-5)


def test_the_loss_weights_only_the_stale_span() -> None:
    """On the two-version response the decoupled loss's gradient is PPO's on the version-1 tokens and PPO's
    times π_prox/π_behav on the version-0 tokens."""
    data = two_version_batch()
    correction = RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold=1e6)
    advantages = torch.tensor([[1.0] * 6, [-1.0] * 6])
    batch = Batch(
        {
            "old_log_probs": data["prox"],
            "rollout_log_probs": data["behav"],
            "response_mask": data["mask"],
            "advantages": advantages,
        }
    )
    apply_rollout_correction(batch, correction)
    current = data["prox"] + 0.05
    _, grad, _ = actor_loss(correction, batch, current=current)
    log_prob = current.clone().requires_grad_(True)
    plain, _ = vanilla_policy_loss(data["prox"], log_prob, advantages, data["mask"], "token-mean", ACTOR)
    plain.backward()
    assert log_prob.grad is not None
    torch.testing.assert_close(grad, log_prob.grad * torch.exp(data["prox"] - data["behav"]))


# ------------------------------------------------------------------ metrics (verl's names)
def test_offpolicy_metrics_by_hand() -> None:
    """verl's ``compute_offpolicy_metrics`` figures over the valid tokens, response figures over the responses."""
    metrics = offpolicy_metrics(PROX, BEHAV, MASK)
    deltas = [[0.2, -0.2, 1.0, 0.0, 0.0], [-0.1, 0.0, 0.1]]
    tokens = [d for row in deltas for d in row]
    assert metrics["rollout_corr/kl"] == pytest.approx(-sum(tokens) / 8)
    assert metrics["rollout_corr/k3_kl"] == pytest.approx(sum(math.exp(d) - d - 1 for d in tokens) / 8)
    training = [(-1.0 - 0.9 - 1.0 - 0.3 - 1.5) / 5, (-0.6 - 1.0 - 1.9) / 3]
    rollout = [(-1.2 - 0.7 - 2.0 - 0.3 - 1.5) / 5, (-0.5 - 1.0 - 2.0) / 3]
    assert metrics["rollout_corr/training_ppl"] == pytest.approx(sum(math.exp(-m) for m in training) / 2)
    assert metrics["rollout_corr/training_log_ppl"] == pytest.approx(-sum(training) / 2)
    assert metrics["rollout_corr/rollout_ppl"] == pytest.approx(sum(math.exp(-m) for m in rollout) / 2)
    assert metrics["rollout_corr/rollout_log_ppl"] == pytest.approx(-sum(rollout) / 2)
    diffs = [r - t for r, t in zip(rollout, training)]
    assert metrics["rollout_corr/log_ppl_diff"] == pytest.approx(sum(diffs) / 2)
    assert metrics["rollout_corr/log_ppl_abs_diff"] == pytest.approx(sum(abs(d) for d in diffs) / 2)
    assert metrics["rollout_corr/log_ppl_diff_max"] == pytest.approx(max(diffs))
    assert metrics["rollout_corr/log_ppl_diff_min"] == pytest.approx(min(diffs))
    assert metrics["rollout_corr/ppl_ratio"] == pytest.approx(sum(math.exp(d) for d in diffs) / 2)
    assert metrics["rollout_corr/chi2_token"] == pytest.approx(sum(math.exp(2 * d) for d in tokens) / 8 - 1)
    assert metrics["rollout_corr/chi2_seq"] == pytest.approx(sum(math.exp(2 * sum(row)) for row in deltas) / 2 - 1)
    assert offpolicy_metrics(PROX, BEHAV, torch.zeros_like(MASK)) == {}


def test_is_spread_metrics_by_hand() -> None:
    """``rollout_is_{max,min,std}`` and ``rollout_is_ratio_fraction_low`` (below 1/threshold, or IcePop's lower
    bound), verl's names, computed before any batch normalisation."""
    metrics = apply_rollout_correction(
        step_batch(), RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold=1.1)
    )
    applied = [1.1, math.exp(-0.2), 1.1, 1.0, 1.0, math.exp(-0.1), 1.0, 1.1]
    assert metrics["rollout_corr/rollout_is_max"] == pytest.approx(1.1)
    assert metrics["rollout_corr/rollout_is_min"] == pytest.approx(math.exp(-0.2))
    mean = sum(applied) / 8
    assert metrics["rollout_corr/rollout_is_std"] == pytest.approx(math.sqrt(sum((w - mean) ** 2 for w in applied) / 8))
    assert metrics["rollout_corr/rollout_is_ratio_fraction_low"] == pytest.approx(2 / 8)  # e^-0.2, e^-0.1 < 1/1.1
    assert metrics["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(3 / 8)
    rows = [sum(applied[:5]) / 5, sum(applied[5:]) / 3]
    assert metrics["rollout_corr/rollout_is_seq_mean"] == pytest.approx(sum(rows) / 2)
    assert metrics["rollout_corr/rollout_is_seq_std"] == pytest.approx(abs(rows[0] - rows[1]) / math.sqrt(2), rel=1e-4)
    assert metrics["rollout_corr/rollout_is_seq_max"] == pytest.approx(max(rows))
    assert metrics["rollout_corr/rollout_is_seq_min"] == pytest.approx(min(rows))
    assert metrics["rollout_corr/rollout_is_seq_max_deviation"] == pytest.approx(
        max(abs(r - 1) for r in rows), rel=1e-4
    )
    # before truncation row 0's mean weight (e^0.2 + e^-0.2 + e + 2) / 5 is above 1.1, row 1's is inside
    assert metrics["rollout_corr/rollout_is_seq_fraction_high"] == 0.5
    assert metrics["rollout_corr/rollout_is_seq_fraction_low"] == 0.0
    sequence = RolloutCorrectionConfig(
        rollout_is="sequence", rollout_is_threshold="0.5_2.0", rollout_is_batch_normalize=True
    )
    metrics = apply_rollout_correction(step_batch(), sequence)
    assert metrics["rollout_corr/rollout_is_max"] == pytest.approx(math.exp(1.0))
    assert metrics["rollout_corr/rollout_is_min"] == pytest.approx(1.0)
    assert metrics["rollout_corr/rollout_is_ratio_fraction_low"] == 0.0
    assert metrics["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(1 / 2)


def test_log_probs_that_do_not_line_up_are_named() -> None:
    """Behaviour log-probs whose shape differs from the responses' are an error naming the columns, not a
    broadcast or a bare torch error."""
    batch = Batch({"old_log_probs": PROX, "rollout_log_probs": BEHAV[:, :4], "response_mask": MASK})
    with pytest.raises(RLCoreError, match=r"rollout_correction: the batch's rollout_log_probs \(2, 4\), old_log_probs"):
        apply_rollout_correction(batch, RolloutCorrectionConfig(rollout_is="token"))


# ------------------------------------------------------------------ a real run
def test_a_real_run_applies_the_weights_in_the_update(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps in decoupled mode whose IcePop bounds [1.5, 2] exclude every weight (the HF engine's
    log-probs equal the trainer's π_old, so every π_old/π_behav is ~1): every weight is 0, so the policy loss and
    the gradient vanish in the workers' update. The weights reach the loss through the micro-batches."""
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        make_tiny_task(tmp_path / "task"),
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "algorithm.rollout_correction.rollout_is=token",
        "algorithm.rollout_correction.rollout_is_threshold='1.5_2.0'",
    )
    assert last["training/global_step"] == 2
    assert last["rollout_corr/rollout_is_oob_ratio"] == 1.0 and last["rollout_corr/rollout_is_mean"] == 0.0
    assert last["actor/pg_loss"] == 0.0 and last["actor/grad_norm"] == 0.0
    assert "timing_s/old_log_prob" in last  # decoupled: π_old is the trainer's own recomputation
