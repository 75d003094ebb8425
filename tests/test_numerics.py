"""Group statistics and whitening do not overflow for any finite float32 reward."""

from __future__ import annotations

import pytest
import torch

from rlcore.algos import group_stats, masked_whiten
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
        config={"norm_adv_by_std_in_grpo": True},
    )
    assert torch.isfinite(advantages).all()
    assert advantages[:, 0].tolist() == pytest.approx([0.7071, -0.7071, 0.7071, -0.7071], rel=1e-3)


def test_whitening_huge_values() -> None:
    x = torch.tensor([[1e30, -1e30, 3e30, 0.0]])
    out = masked_whiten(x, torch.ones_like(x))
    assert torch.isfinite(out).all() and out.dtype == torch.float32 and out.abs().max() < 10
