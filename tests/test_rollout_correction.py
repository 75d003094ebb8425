"""Train/inference mismatch metrics and truncated importance sampling (``algorithm.rollout_correction``)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rlcore.algos.rollout_correction import rollout_is_weights, rollout_mismatch_metrics
from rlcore.config import ConfigError, derive_quantities, load_config
from rlcore.errors import RLCoreError
from rlcore.testing.runs import make_tiny_task, tiny_run

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
    assert metrics["rollout_corr/is_truncated_frac"] == pytest.approx(1 / 5)
    raw_mean = (math.exp(0.5) + 1 + math.exp(-0.1) + math.exp(1.9) + math.exp(0.5)) / 5
    assert metrics["rollout_corr/is_weight_mean"] == pytest.approx(raw_mean)


def test_sequence_weights_share_one_ratio_per_response() -> None:
    """``w = min(exp(Σ_t (old_t − rollout_t)), threshold)`` on every valid token of the response."""
    weights, _ = rollout_is_weights(OLD, ROLLOUT, MASK, "sequence", 20.0)
    expected = torch.tensor([[math.exp(0.4)] * 3, [math.exp(2.4), math.exp(2.4), 0.0]])
    torch.testing.assert_close(weights, expected)


def test_bad_settings_name_the_key() -> None:
    """An unknown level or a threshold ≤ 0 is an error naming ``algorithm.rollout_correction``."""
    with pytest.raises(RLCoreError, match="algorithm.rollout_correction.rollout_is must be one of token, sequence"):
        rollout_is_weights(OLD, ROLLOUT, MASK, "batch", 2.0)
    with pytest.raises(RLCoreError, match="rollout_is_threshold must be > 0"):
        rollout_is_weights(OLD, ROLLOUT, MASK, "token", 0.0)


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
            "rollout_is_threshold must be a number > 0",
        ),
    ],
)
def test_config_is_checked_before_the_run(overrides: list[str], message: str) -> None:
    """Bad correction settings stop the run at config time, naming the key to change."""
    with pytest.raises(ConfigError, match=message):
        derive_quantities(load_config(overrides=overrides))


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
    assert last["rollout_corr/is_weight_mean"] == pytest.approx(1.0, abs=1e-4)
    assert last["rollout_corr/is_truncated_frac"] == 0.0
