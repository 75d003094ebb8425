"""PRIME's advantages: leave-one-out (RLOO) baselines on the implicit process rewards and on the outcome
reward, weighted, summed, turned into rewards-to-go and whitened (verl's ``recipe/prime``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlcore.api import group_stats, masked_whiten
from rlcore_plugin_prime.config import PrimeAlgorithmConfig


def leave_one_out(rewards: torch.Tensor, mask: torch.Tensor, index: Sequence[Any]) -> torch.Tensor:
    """Token rewards minus a leave-one-out baseline: with m_i the mean of response i's rewards over ``mask``
    and n its group's size, each token's r becomes (n·r − Σ_group m) / (n − 1) — for one reward on the last
    token, r_i − mean of the other responses' rewards. A group of one keeps its rewards."""
    weights = mask.to(rewards.dtype)
    per_sample = (rewards * weights).sum(-1) / weights.sum(-1).clamp_min(1.0)
    stats = group_stats(per_sample, index)
    n = stats.size.unsqueeze(-1)
    total = (stats.mean * stats.size).unsqueeze(-1)
    out = torch.where(n > 1, (n * rewards - total) / (n - 1).clamp_min(1.0), rewards)
    return out * weights


@torch.no_grad()
def compute_prime_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    config: PrimeAlgorithmConfig,
    rm_scores: torch.Tensor,
    acc: torch.Tensor,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantages, returns)`` ``[B, R]``.

    ``rm_scores`` are the implicit PRM's token rewards and ``acc`` the outcome labels (the rule scores);
    ``algorithm.reward_dpo_coef`` and ``algorithm.reward_gt_coef`` weight their leave-one-out rewards (the
    outcome on each response's last valid token). The returns are the rewards-to-go of their sum and the
    advantages the whitened returns. ``token_level_rewards`` (the rule scores) is not used: ``acc`` carries
    the outcome.
    """
    mask = response_mask.bool()
    rewards = torch.zeros_like(rm_scores, dtype=torch.float32)
    dpo_coef = float(config.reward_dpo_coef)
    gt_coef = float(config.reward_gt_coef)
    if dpo_coef:
        rewards += dpo_coef * leave_one_out(rm_scores.float(), mask, index)
    if gt_coef:
        last = torch.zeros_like(mask)
        length = response_mask.sum(-1).long()
        rows = torch.nonzero(length > 0).squeeze(-1)
        last[rows, length[rows] - 1] = True
        outcome = torch.zeros_like(rewards)
        outcome[rows, length[rows] - 1] = acc.float()[rows]
        rewards += gt_coef * leave_one_out(outcome, last, index)
    rewards = rewards * mask
    returns = rewards.flip(-1).cumsum(-1).flip(-1) * mask
    return masked_whiten(returns, mask) * mask, returns
