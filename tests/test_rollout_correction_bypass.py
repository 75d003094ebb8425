"""Rollout correction's bypass mode: the engine's log-probs are the old policy and the policy loss computes the
IS weights and the RS mask per micro-batch from the current policy (``algorithm.rollout_correction.bypass_mode``
with ``loss_type=ppo_clip|reinforce``). Expected values are worked out by hand from verl's formulas
(``compute_policy_loss_bypass_mode``, ``compute_policy_loss_reinforce``, ``compute_policy_loss_vanilla``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.algos.functional import loss_units
from rlcore.algos.losses import build_actor_loss, vanilla_policy_loss
from rlcore.algos.rollout_correction import bypass_policy_loss
from rlcore.config import ConfigError, derive_quantities, load_config
from rlcore.config.sections.actor import ActorConfig
from rlcore.config.sections.algorithm import RolloutCorrectionConfig
from rlcore.errors import RLCoreError

ROLLOUT = torch.tensor([[-1.5, -2.0, -0.4], [-2.0, -3.5, -1.0]])
CURRENT = torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -3.0, -9.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
ADV = torch.tensor([[1.0, -1.0, 0.5], [2.0, -0.5, 3.0]])
# δ = current − rollout on valid tokens: row 0 [0.5, 0, −0.1], row 1 [1.9, 0.5]
CLIP = ActorConfig()  # clip ratio 0.2 both sides
CALC = "actor_rollout_ref.rollout.calculate_log_probs=true"
KEY = "algorithm.rollout_correction"


def bypass(**correction: Any) -> Any:
    """The bypass loss around the vanilla PPO loss for ``correction`` (bypass_mode on)."""
    return bypass_policy_loss(vanilla_policy_loss, RolloutCorrectionConfig(bypass_mode=True, **correction))


def run_loss(loss: Any, agg: str = "token-mean") -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """``(loss, d loss / d log_prob, metrics)`` of ``loss`` on the module's tensors."""
    log_prob = CURRENT.clone().requires_grad_(True)
    value, metrics = loss(ROLLOUT, log_prob, ADV, MASK, agg, CLIP)
    value.backward()
    assert log_prob.grad is not None
    return value.detach(), log_prob.grad, metrics


# ------------------------------------------------------------------ REINFORCE
def test_reinforce_without_weights_is_the_plain_policy_gradient() -> None:
    """``−agg(A · logπ)``: −(−1 + 2 − 0.25 − 0.2 + 1.5) / 5; the gradient is −A / 5 on valid tokens."""
    value, grad, metrics = run_loss(bypass(loss_type="reinforce"))
    assert float(value) == pytest.approx(-0.41)
    torch.testing.assert_close(grad, torch.tensor([[-0.2, 0.2, -0.1], [-0.4, 0.1, 0.0]]))
    assert metrics["actor/ppo_kl"] == pytest.approx(-(0.5 + 0 - 0.1 + 1.9 + 0.5) / 5)
    assert metrics["rollout_corr/kl"] == pytest.approx(-0.56)
    k3 = sum(math.exp(d) - d - 1 for d in (0.5, 0.0, -0.1, 1.9, 0.5)) / 5
    assert metrics["rollout_corr/k3_kl"] == pytest.approx(k3)
    assert "rollout_corr/rollout_is_mean" not in metrics


def test_reinforce_token_weights_scale_the_gradient_without_carrying_one() -> None:
    """Token TIS: w = min(exp(δ), 2) from the detached current policy; loss −Σ A·logπ·w / 5, gradient −A·w / 5."""
    value, grad, metrics = run_loss(bypass(loss_type="reinforce", rollout_is="token", rollout_is_threshold=2.0))
    weights = torch.tensor([[math.exp(0.5), 1.0, math.exp(-0.1)], [2.0, math.exp(0.5), 0.0]])
    expected = -(ADV * CURRENT * weights * MASK).sum() / 5
    assert float(value) == pytest.approx(float(expected))
    torch.testing.assert_close(grad, -ADV * weights * MASK / 5)
    assert metrics["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(1 / 5)


def test_reinforce_sequence_weights_batch_normalised() -> None:
    """Sequence TIS normalised to mean 1 over the micro-batch's responses: w = [e^0.4, min(e^2.4, 5)] / mean."""
    loss = bypass(
        loss_type="reinforce", rollout_is="sequence", rollout_is_threshold=5.0, rollout_is_batch_normalize=True
    )
    value, grad, metrics = run_loss(loss, "seq-mean-token-sum")
    factor = (math.exp(0.4) + 5.0) / 2
    assert metrics["rollout_corr/rollout_is_batch_norm_factor"] == pytest.approx(factor)
    w0, w1 = math.exp(0.4) / factor, 5.0 / factor
    row0 = -(1.0 * -1.0 + -1.0 * -2.0 + 0.5 * -0.5) * w0
    row1 = -(2.0 * -0.1 + -0.5 * -3.0) * w1
    assert float(value) == pytest.approx((row0 + row1) / 2)
    torch.testing.assert_close(grad, -ADV * torch.tensor([[w0] * 3, [w1, w1, 0.0]]) / 2)


# ------------------------------------------------------------------ PPO-clip
def test_ppo_clip_reports_but_does_not_apply_the_weights() -> None:
    """``ppo_clip``: the vanilla loss against the rollout policy, unweighted (the ratio is the correction)."""
    value, _, metrics = run_loss(bypass(rollout_is="token", rollout_is_threshold=2.0))
    plain, plain_metrics = vanilla_policy_loss(ROLLOUT, CURRENT, ADV, MASK, "token-mean", CLIP)
    assert float(value) == pytest.approx(float(plain))
    assert metrics["actor/pg_clipfrac"] == pytest.approx(plain_metrics["actor/pg_clipfrac"])
    truncated_mean = (math.exp(0.5) + 1 + math.exp(-0.1) + 2.0 + math.exp(0.5)) / 5
    assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(truncated_mean)


# vanilla token losses (clip 0.2, dual clip 3) on the tokens token_k1 "0.5_2.0" keeps (it rejects δ = 1.9):
# row 0: max(−e^0.5, −1.2) = −1.2; 1 (r = 1); −0.5·e^−0.1; row 1, token 1: max(0.5·e^0.5, 0.6) = 0.5·e^0.5
KEPT = [[-1.2, 1.0, -0.5 * math.exp(-0.1)], [0.5 * math.exp(0.5)]]


def test_ppo_clip_rejection_counts_rejected_tokens_as_zeros() -> None:
    """token-mean divides by all 5 valid tokens (verl's global token count), not the 4 kept ones."""
    value, grad, metrics = run_loss(bypass(rollout_rs="token_k1", rollout_rs_threshold="0.5_2.0"))
    assert float(value) == pytest.approx(sum(map(sum, KEPT)) / 5)
    assert float(grad[1, 0]) == 0.0 and float(grad[0, 1]) != 0.0
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(1 / 5)
    assert metrics["rollout_corr/rollout_rs_token_k1_masked_fraction"] == pytest.approx(1 / 5)
    assert metrics["rollout_corr/rollout_rs_seq_masked_fraction"] == pytest.approx(1 / 2)


def test_ppo_clip_rejection_with_sequence_mean_of_token_means() -> None:
    """seq-mean-token-mean: each response's mean over its kept tokens, averaged over both responses."""
    value, _, _ = run_loss(bypass(rollout_rs="token_k1", rollout_rs_threshold="0.5_2.0"), "seq-mean-token-mean")
    assert float(value) == pytest.approx((sum(KEPT[0]) / 3 + KEPT[1][0]) / 2)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_micro_batches_add_up_to_the_whole_batch(agg: str) -> None:
    """Split into one-row micro-batches and weighted by their share of the mini-batch's units, as
    ``ppo_update`` does, the bypass loss with token IS and RS equals the loss of the whole batch."""
    loss = bypass(
        loss_type="reinforce", rollout_is="token", rollout_rs="token_k1,seq_max_k2", rollout_rs_threshold="0.5_2.0,2.5"
    )
    whole, _ = loss(ROLLOUT, CURRENT, ADV, MASK, agg, CLIP)
    total = loss_units(MASK, agg)
    parts = [
        loss(ROLLOUT[i : i + 1], CURRENT[i : i + 1], ADV[i : i + 1], MASK[i : i + 1], agg, CLIP)[0]
        * loss_units(MASK[i : i + 1], agg)
        / total
        for i in range(2)
    ]
    assert float(sum(parts)) == pytest.approx(float(whole))


def test_an_empty_micro_batch_gives_a_zero_loss() -> None:
    """A micro-batch of padding only: loss 0, no error, and no rollout_corr/* statistics to pull the averages to 0."""
    loss = bypass(
        loss_type="reinforce",
        rollout_is="sequence",
        rollout_is_batch_normalize=True,
        rollout_rs="token_k2",
        rollout_rs_threshold=0.1,
    )
    value, metrics = loss(ROLLOUT, CURRENT, ADV, torch.zeros_like(MASK), "token-mean", CLIP)
    assert float(value) == 0.0
    assert not any(name.startswith("rollout_corr/") for name in metrics)


# ------------------------------------------------------------------ the actor loss and the configuration
def test_the_actor_loss_uses_the_bypass_loss_in_bypass_mode() -> None:
    """``build_actor_loss`` with the ``algorithm.rollout_correction`` section of a bypass run."""
    config = load_config(overrides=[f"{KEY}.bypass_mode=true", f"{KEY}.loss_type=reinforce", CALC])
    actor = ActorConfig.from_tree(config)
    loss_fn = build_actor_loss(actor, rollout_correction=RolloutCorrectionConfig.from_tree(config, KEY))
    micro = {"old_log_probs": ROLLOUT, "advantages": ADV, "response_mask": MASK}
    value, metrics = loss_fn(CURRENT, None, micro)
    assert float(value) == pytest.approx(-0.41)
    assert metrics["rollout_corr/kl"] == pytest.approx(-0.56)
    plain, plain_metrics = build_actor_loss(actor)(CURRENT, None, micro)
    assert "rollout_corr/kl" not in plain_metrics and float(plain) != pytest.approx(-0.41)


@pytest.mark.parametrize(
    ("correction", "loss_mode", "message"),
    [
        ({"bypass_mode": True, "loss_type": "sgd"}, "vanilla", "loss_type must be one of ppo_clip, reinforce"),
        ({"loss_type": "reinforce"}, "vanilla", "loss_type=reinforce is the policy loss of bypass mode"),
        ({"bypass_mode": True, "loss_type": "reinforce"}, "gspo", "policy_loss.loss_mode=gspo"),
    ],
)
def test_bad_combinations_are_named(correction: dict[str, Any], loss_mode: str, message: str) -> None:
    with pytest.raises(RLCoreError, match=message):
        bypass_policy_loss(vanilla_policy_loss, RolloutCorrectionConfig(**correction), loss_mode)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([f"{KEY}.loss_type=reinforce", CALC], "set algorithm.rollout_correction.bypass_mode=true"),
        (
            [f"{KEY}.bypass_mode=true", f"{KEY}.loss_type=pg", CALC],
            "loss_type must be one of ppo_clip, reinforce, got 'pg'",
        ),
        (
            [
                f"{KEY}.bypass_mode=true",
                f"{KEY}.loss_type=reinforce",
                "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
                CALC,
            ],
            "loss_type=reinforce replaces the policy loss",
        ),
        (
            [f"{KEY}.bypass_mode=true", f"{KEY}.rollout_is=token"],
            "set actor_rollout_ref.rollout.calculate_log_probs=true",
        ),
        ([f"{KEY}.bypass_mode=true", f"{KEY}.rollout_rs=token_k1", CALC], "rollout_rs_threshold must be given"),
    ],
)
def test_bad_settings_stop_the_dry_run(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        derive_quantities(load_config(overrides=overrides))


def test_the_plan_notes_weights_that_ppo_clip_only_reports() -> None:
    notes = derive_quantities(load_config(overrides=[f"{KEY}.bypass_mode=true", f"{KEY}.rollout_is=token", CALC])).notes
    assert any("are reported (rollout_corr/rollout_is_*), not applied" in note for note in notes)
    reinforce = [f"{KEY}.bypass_mode=true", f"{KEY}.rollout_is=token", f"{KEY}.loss_type=reinforce", CALC]
    assert not any(
        "rollout_corr/rollout_is_" in note for note in derive_quantities(load_config(overrides=reinforce)).notes
    )


# ------------------------------------------------------------------ real runs
def test_run_reinforce_with_normalised_sequence_weights(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps as verl's RLOO rollout-correction script: bypass, REINFORCE, sequence TIS normalised.
    Two mini-batches per step, so the second one's policy has moved away from the rollout's."""
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        make_tiny_task(tmp_path / "task"),
        "algorithm.adv_estimator=rloo",
        CALC,
        f"{KEY}.bypass_mode=true",
        f"{KEY}.loss_type=reinforce",
        f"{KEY}.rollout_is=sequence",
        f"{KEY}.rollout_is_batch_normalize=true",
    )
    assert last["training/global_step"] == 2
    assert "timing_s/old_log_prob" not in last and "training/rollout_probs_diff_max" not in last
    assert last["rollout_corr/rollout_is_batch_norm_factor"] > 0
    assert last["rollout_corr/k3_kl"] > 0  # the second mini-batch's policy is one update away
    assert math.isfinite(last["actor/pg_loss"]) and "actor/pg_clipfrac" not in last


def test_run_ppo_clip_with_two_rejection_rules(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps as verl's multi-RS script: bypass, PPO-clip, token IS reported, token_k1 + seq_max_k2."""
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        make_tiny_task(tmp_path / "task"),
        "algorithm.adv_estimator=grpo",
        CALC,
        f"{KEY}.bypass_mode=true",
        f"{KEY}.rollout_is=token",
        f"{KEY}.rollout_rs='token_k1,seq_max_k2'",
        f"{KEY}.rollout_rs_threshold='0.6_1.6,2.5'",
    )
    assert last["training/global_step"] == 2
    assert 0.0 <= last["rollout_corr/rollout_rs_masked_fraction"] <= 1.0
    assert last["rollout_corr/rollout_is_mean"] > 0
    assert "actor/pg_clipfrac" in last and "rollout_corr/k3_kl" in last
