"""Train/inference mismatch metrics and truncated importance sampling (``algorithm.rollout_correction``)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.algos.rollout_correction import rollout_is_weights, rollout_mismatch_metrics
from rlcore.config import ConfigError, derive_quantities, load_config
from rlcore.errors import RLCoreError

OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -3.0, -9.0]])
ROLLOUT = torch.tensor([[-1.5, -2.0, -0.4], [-2.0, -3.5, -1.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def test_mismatch_metrics_over_valid_tokens() -> None:
    """``|exp(old) − exp(rollout)|`` statistics and the mean log-prob gap, padding excluded."""
    metrics = rollout_mismatch_metrics(OLD, ROLLOUT, MASK)
    valid = MASK.bool()
    diff = (OLD.exp() - ROLLOUT.exp()).abs()[valid]
    assert metrics["training/rollout_probs_diff_max"] == pytest.approx(float(diff.max()))
    assert metrics["training/rollout_probs_diff_mean"] == pytest.approx(float(diff.mean()))
    assert metrics["training/rollout_probs_diff_std"] == pytest.approx(float(diff.std(unbiased=False)))
    assert metrics["training/rollout_log_probs_diff_mean"] == pytest.approx((0.5 + 0 - 0.1 + 1.9 + 0.5) / 5)
    assert rollout_mismatch_metrics(OLD, ROLLOUT, torch.zeros_like(MASK)) == {}


def test_token_weights_are_truncated_ratios() -> None:
    """``w_t = min(exp(old_t − rollout_t), threshold)``, 0 on padding."""
    weights, metrics = rollout_is_weights(OLD, ROLLOUT, MASK, "token", 2.0)
    expected = torch.tensor([[math.exp(0.5), 1.0, math.exp(-0.1)], [2.0, math.exp(0.5), 0.0]])
    torch.testing.assert_close(weights, expected)
    assert metrics["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(1 / 5)
    assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(float(expected.sum()) / 5)
    normalised = expected[MASK.bool()] / (expected.sum() / 5)
    assert metrics["rollout_corr/rollout_is_eff_sample_size"] == pytest.approx(1 / float(normalised.square().mean()))


def test_sequence_weights_share_one_ratio_per_response() -> None:
    """``w = min(exp(Σ_t (old_t − rollout_t)), threshold)`` on every valid token of the response."""
    weights, _ = rollout_is_weights(OLD, ROLLOUT, MASK, "sequence", 20.0)
    expected = torch.tensor([[math.exp(0.4)] * 3, [math.exp(2.4), math.exp(2.4), 0.0]])
    torch.testing.assert_close(weights, expected)
    _, metrics = rollout_is_weights(OLD, ROLLOUT, MASK, "sequence", 2.0)
    assert metrics["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(1 / 2)  # of the responses


def test_bad_settings_name_the_key() -> None:
    """An unknown level or a threshold ≤ 0 is an error naming ``algorithm.rollout_correction``."""
    with pytest.raises(RLCoreError, match="algorithm.rollout_correction.rollout_is must be one of token, sequence"):
        rollout_is_weights(OLD, ROLLOUT, MASK, "batch", 2.0)
    with pytest.raises(RLCoreError, match="rollout_is_threshold: bounds must be > 0"):
        rollout_is_weights(OLD, ROLLOUT, MASK, "token", 0.0)
    for spec in ("2.0_0.5", "0_2", "low_high", True):
        with pytest.raises(RLCoreError, match="algorithm.rollout_correction.rollout_is_threshold"):
            rollout_is_weights(OLD, ROLLOUT, MASK, "token", spec)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_icepop_bounds_zero_the_weights_outside_them(level: str) -> None:
    """``rollout_is_threshold="lower_upper"`` (verl's IcePop): a weight inside ``[lower, upper]`` is kept as it is,
    one outside becomes 0 (not truncated); ``rollout_is_oob_ratio`` is the fraction of valid tokens outside."""
    raw, _ = rollout_is_weights(OLD, ROLLOUT, MASK, level, 1e6)
    lower, upper = 0.9, 3.0
    weights, metrics = rollout_is_weights(OLD, ROLLOUT, MASK, level, f"{lower}_{upper}")
    inside = (raw >= lower) & (raw <= upper)
    torch.testing.assert_close(weights, torch.where(inside, raw, torch.zeros_like(raw)))
    valid = MASK.bool()
    assert (~inside & valid).any() and (inside & valid).any()  # both cases occur in this batch
    assert metrics["rollout_corr/rollout_is_oob_ratio"] == pytest.approx(float((~inside & valid).sum() / valid.sum()))
    assert "rollout_corr/rollout_is_oob_ratio" not in rollout_is_weights(OLD, ROLLOUT, MASK, level, upper)[1]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm.rollout_correction.rollout_is=token"], "set actor_rollout_ref.rollout.calculate_log_probs=true"),
        (
            ["algorithm.rollout_correction.rollout_is=batch", "actor_rollout_ref.rollout.calculate_log_probs=true"],
            "rollout_is must be one of token, sequence or null, got 'batch'",
        ),
        (
            [
                "algorithm.rollout_correction.rollout_is=token",
                "actor_rollout_ref.rollout.calculate_log_probs=true",
                "algorithm.rollout_correction.rollout_is_threshold=-1",
            ],
            "rollout_is_threshold: bounds must be > 0",
        ),
    ],
)
def test_config_is_checked_before_the_run(overrides: list[str], message: str) -> None:
    """Bad correction settings stop the run at config time, naming the key to change."""
    with pytest.raises(ConfigError, match=message):
        derive_quantities(load_config(overrides=overrides))


def test_icepop_bounds_pass_the_config_check_as_text() -> None:
    """verl's IcePop spelling ``rollout_is_threshold='lower_upper'`` is accepted on the command line (its default
    is a number); bounds in the wrong order are an error naming the key."""
    base = ["algorithm.rollout_correction.rollout_is=token", "actor_rollout_ref.rollout.calculate_log_probs=true"]
    config = load_config(overrides=[*base, "algorithm.rollout_correction.rollout_is_threshold='0.5_2.0'"])
    derive_quantities(config)
    assert config.algorithm.rollout_correction.rollout_is_threshold == "0.5_2.0"
    with pytest.raises(ConfigError, match="rollout_is_threshold: bounds must be > 0 with lower ≤ upper, got '2.0_0.5'"):
        derive_quantities(load_config(overrides=[*base, "algorithm.rollout_correction.rollout_is_threshold='2.0_0.5'"]))


def test_run_logs_mismatch_and_applies_weights(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps with rollout log-probs and token-level TIS: the HF engine samples exactly the trainer's
    policy in float32, so the mismatch is ~0 and the weights ~1."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "algorithm.rollout_correction.rollout_is=token",
    )
    assert last["training/rollout_probs_diff_max"] < 1e-4
    assert last["rollout_corr/rollout_is_mean"] == pytest.approx(1.0, abs=1e-4)
    assert last["rollout_corr/rollout_is_ratio_fraction_high"] == 0.0
    assert abs(last["rollout_corr/kl"]) < 1e-4
    # verl's off-policy diagnostics of decoupled mode (π_old against the rollout's policy), all finite
    assert last["rollout_corr/training_ppl"] == pytest.approx(last["rollout_corr/rollout_ppl"], rel=1e-4)
    assert abs(last["rollout_corr/chi2_token"]) < 1e-3 and abs(last["rollout_corr/chi2_seq"]) < 1e-3
    assert last["rollout_corr/rollout_is_min"] <= 1.0 + 1e-4 <= last["rollout_corr/rollout_is_max"] + 2e-4
    assert all(math.isfinite(last[key]) for key in last if key.startswith(("rollout_corr/", "actor/pg_loss")))


# ------------------------------------------------------------------ batch normalisation, rejection sampling, bypass
def test_batch_normalize_divides_by_the_batch_mean() -> None:
    """``rollout_is_batch_normalize``: token level over valid tokens, sequence level over responses."""
    token, metrics = rollout_is_weights(OLD, ROLLOUT, MASK, "token", 2.0, batch_normalize=True)
    truncated = torch.tensor([math.exp(0.5), 1.0, math.exp(-0.1), 2.0, math.exp(0.5)])
    assert metrics["rollout_corr/rollout_is_batch_norm_factor"] == pytest.approx(float(truncated.mean()))
    assert float(token[MASK.bool()].mean()) == pytest.approx(1.0)
    seq, metrics = rollout_is_weights(OLD, ROLLOUT, MASK, "sequence", 5.0, batch_normalize=True)
    factor = (math.exp(0.4) + 5.0) / 2
    assert metrics["rollout_corr/rollout_is_batch_norm_factor"] == pytest.approx(factor)
    torch.testing.assert_close(seq, torch.tensor([[math.exp(0.4)] * 3, [5.0, 5.0, 0.0]]) / factor)


# δ = old − rollout per valid token: row 0 [0.5, 0, −0.1], row 1 [1.9, 0.5]
@pytest.mark.parametrize(
    ("option", "threshold", "kept"),
    [
        # k1 = −δ within [log 0.5, log 2] = [−0.693, 0.693]: rejects δ = 1.9 only
        ("token_k1", "0.5_2.0", [[1, 1, 1], [0, 1, 0]]),
        ("token_k1", 2.0, [[1, 1, 1], [0, 1, 0]]),  # one number u means 1/u_u
        # k2 = δ²/2 ≤ 0.1: rejects δ = 0.5 (0.125) and 1.9
        ("token_k2", 0.1, [[0, 1, 1], [0, 0, 0]]),
        # k3 = e^δ − 1 − δ; row sums: 0.1487 + 0 + 0.0048 = 0.1535 and 3.7859 + 0.1487 = 3.9346
        ("seq_sum_k3", 1.0, [[1, 1, 1], [0, 0, 0]]),
        ("seq_mean_k3", 0.05, [[0, 0, 0], [0, 0, 0]]),
        ("seq_mean_k3", 0.06, [[1, 1, 1], [0, 0, 0]]),
        ("seq_max_k2", 0.2, [[1, 1, 1], [0, 0, 0]]),
        ("token_k1,seq_mean_k3", "0.5_2.0,2.0", [[1, 1, 1], [0, 1, 0]]),
    ],
)
def test_rejection_sampling_options(option: str, threshold: object, kept: list[list[int]]) -> None:
    from rlcore.algos.rollout_correction import parse_rejection_rules, rejection_mask

    mask, metrics = rejection_mask(OLD, ROLLOUT, MASK, parse_rejection_rules(option, threshold))
    assert mask.tolist() == kept
    expected = torch.tensor(kept)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(1 - float(expected.sum()) / 5)
    lost = [bool((MASK[i].bool() & ~expected[i].bool()).any()) for i in range(2)]
    assert metrics["rollout_corr/rollout_rs_seq_masked_fraction"] == pytest.approx(sum(lost) / 2)
    if "," not in option:
        assert metrics[f"rollout_corr/rollout_rs_{option}_masked_fraction"] == pytest.approx(
            1 - float(expected.sum()) / 5
        )


@pytest.mark.parametrize(
    ("option", "threshold", "message"),
    [
        ("token_k4", 1.0, "unknown option"),
        ("token_k1", None, "rollout_rs_threshold must be given"),
        ("token_k2", "0.1_2", "single upper bound"),
        ("token_k1,token_k2", "1,2,3", "3 thresholds for 2"),
        ("seq_sum_k2", -1, "must be > 0"),
        ("seq_sum_k2", "abc", "not a number"),
    ],
)
def test_rejection_settings_are_checked(option: str, threshold: object, message: str) -> None:
    from rlcore.algos.rollout_correction import parse_rejection_rules

    with pytest.raises(RLCoreError, match=message):
        parse_rejection_rules(option, threshold)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm.rollout_correction.rollout_rs=token_k2"], "rollout_rs needs the engine's log-probs"),
        (
            ["algorithm.rollout_correction.rollout_rs=token_k2", "actor_rollout_ref.rollout.calculate_log_probs=true"],
            "rollout_rs_threshold must be given",
        ),
        (["algorithm.use_pf_ppo=true", "algorithm.pf_ppo.reweight_method=top"], "reweight_method must be one of"),
    ],
)
def test_new_settings_are_checked_before_the_run(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        derive_quantities(load_config(overrides=overrides))


def test_run_with_rejection_sampling_and_normalised_weights(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps with sequence TIS normalised to mean 1 and token rejection: the HF engine's
    log-probs match the trainer's, so nothing is rejected and the normalisation factor is ~1."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "algorithm.rollout_correction.rollout_is=sequence",
        "algorithm.rollout_correction.rollout_is_batch_normalize=true",
        "algorithm.rollout_correction.rollout_rs=token_k1,seq_max_k3",
        "algorithm.rollout_correction.rollout_rs_threshold=0.5_2.0,0.1",
    )
    assert last["rollout_corr/rollout_rs_masked_fraction"] == 0.0
    assert last["rollout_corr/rollout_is_batch_norm_factor"] == pytest.approx(1.0, abs=1e-3)


def test_bypass_mode_skips_the_old_log_prob_pass(tmp_path: Path, tiny_model_dir: Path) -> None:
    """``bypass_mode``: old_log_probs are the engine's, so no ``timing_s/old_log_prob`` stage runs and the
    controller logs no mismatch (it would be 0); the loss reports the current policy's drift instead."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "algorithm.rollout_correction.bypass_mode=true",
    )
    assert "training/rollout_probs_diff_max" not in last
    assert last["rollout_corr/k3_kl"] >= 0.0
    assert math.isfinite(last["rollout_corr/chi2_token"]) and math.isfinite(last["rollout_corr/training_ppl"])
    assert "timing_s/old_log_prob" not in last
    assert last["training/global_step"] == 2
