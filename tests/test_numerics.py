"""Group statistics and whitening do not overflow for any finite float32 reward."""

from __future__ import annotations

import pytest
import torch
from rlcore_testkit.config import contract_section

from rlcore.algos import group_stats, masked_whiten
from rlcore.api import ActorConfig, AlgorithmConfig
from rlcore.plugins import get_component


@pytest.mark.parametrize("scale", [1.0, 1e10, 1e30, 1e38])
def test_group_statistics_are_finite_and_scale_free(scale: float) -> None:
    scores = torch.tensor([1.0, 0.0, 2.0, 3.0], dtype=torch.float32) * scale
    stats = group_stats(scores, ["a", "a", "b", "b"])
    assert torch.isfinite(stats.std).all() and stats.std.dtype == torch.float32
    unit = group_stats(torch.tensor([1.0, 0.0, 2.0, 3.0]), ["a", "a", "b", "b"])
    assert torch.allclose(stats.std / scale, unit.std, rtol=1e-5)


@pytest.mark.parametrize("scale", [1.0, 1e30])
def test_grpo_advantages_do_not_vanish_for_huge_rewards(scale: float) -> None:
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 1.0, 0.0]) * scale
    estimator = get_component("advantage_estimator", "grpo")
    advantages, _ = estimator(
        token_level_rewards=rewards,
        response_mask=torch.ones(4, 3),
        index=["a", "a", "b", "b"],
        config=contract_section(AlgorithmConfig, {"algorithm.norm_adv_by_std_in_grpo": True}),
    )
    assert torch.isfinite(advantages).all()
    assert advantages[:, 0].tolist() == pytest.approx([0.7071, -0.7071, 0.7071, -0.7071], rel=1e-3)


def test_whitening_huge_values() -> None:
    x = torch.tensor([[1e30, -1e30, 3e30, 0.0]])
    out = masked_whiten(x, torch.ones_like(x))
    assert torch.isfinite(out).all() and out.dtype == torch.float32 and out.abs().max() < 10


# ------------------------------------------------------------------ verl's aggregation (v0.8.0 to v0.9.0) and GSPO
# Hand-written from verl v0.9.0's formulas (core_algos.agg_loss, compute_policy_loss_gspo), one global batch.
VERL_LOSS = torch.tensor([[0.5, -1.0, 2.0, 9.0], [3.0, 9.0, 9.0, 9.0], [9.0, 9.0, 9.0, 9.0], [-2.0, 4.0, 1.0, 0.5]])
VERL_MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])


def test_seq_mean_token_sum_norm_is_verls() -> None:
    """verl v0.9.0: Σ_i seq_sum_i · [seq i non-empty] / (non-empty sequences) / loss_scale_factor (default R)."""
    from rlcore.algos import agg_loss

    seq_sums = [0.5 - 1.0 + 2.0, 3.0, 0.0, -2.0 + 4.0 + 1.0 + 0.5]  # the empty third row is not counted
    verl = (seq_sums[0] + seq_sums[1] + seq_sums[3]) / 3 / 4  # 3 non-empty sequences, padded R = 4
    assert agg_loss(VERL_LOSS, VERL_MASK, "seq-mean-token-sum-norm").item() == pytest.approx(verl)
    assert agg_loss(VERL_LOSS, VERL_MASK, "seq-mean-token-sum-norm", 16.0).item() == pytest.approx(verl * 4 / 16)
    # the old value (verl <= 0.7's) was the sequence count times this one
    assert agg_loss(VERL_LOSS, VERL_MASK, "seq-mean-token-sum-norm").item() * 3 == pytest.approx(sum(seq_sums) / 4)


def test_drgrpo_loss_does_not_grow_with_the_batch() -> None:
    """Repeating the batch leaves the Dr. GRPO loss unchanged (it used to double with it)."""
    from rlcore.algos import agg_loss

    once = agg_loss(VERL_LOSS, VERL_MASK, "seq-mean-token-sum-norm")
    twice = agg_loss(VERL_LOSS.repeat(2, 1), VERL_MASK.repeat(2, 1), "seq-mean-token-sum-norm")
    assert twice.item() == pytest.approx(once.item())


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_gspo_follows_loss_agg_mode(mode: str) -> None:
    """GSPO's token losses max(−A·s, −A·clip(s)) aggregated by the configured mode (default token-mean), as
    issue 20 asks; verl v0.9.0 forces seq-mean-token-mean, which the ``gspo`` preset sets."""
    import math

    gspo = get_component("policy_loss", "gspo")
    old = torch.tensor([[-1.0, -1.0, -1.0, -1.0], [-2.0, -2.0, -2.0, -2.0]])
    delta = torch.tensor([[0.02, 0.04, 0.0, 0.0], [-0.01, -0.02, -0.03, -0.04]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    adv = torch.tensor([[1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0]])
    config = ActorConfig(clip_ratio_low=0.2, clip_ratio_high=0.2)
    loss, _ = gspo(old, old + delta, adv, mask, mode, config)
    s0, s1 = math.exp(0.03), math.exp(-0.025)  # both inside [0.8, 1.2]: token loss −A·s
    row0, row1 = [-s0, -s0], [-2 * s1] * 4
    verl = {
        "token-mean": (sum(row0) + sum(row1)) / 6,
        "seq-mean-token-mean": (sum(row0) / 2 + sum(row1) / 4) / 2,
        "seq-mean-token-sum-norm": (sum(row0) + sum(row1)) / 2 / 4,
    }[mode]
    assert loss.item() == pytest.approx(verl, rel=1e-6)
