"""REINFORCE++ (Hu, 2025): policy-gradient advantages normalised over the whole batch instead of per group,
with no critic."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlcore.api import AlgorithmConfig, group_stats, masked_whiten


@torch.no_grad()
def compute_reinforce_plus_plus_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: AlgorithmConfig,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ advantages: batch-whitened discounted returns.

    A reverse scan computes G_t = r_t + γ·G_{t+1} (γ = ``config.gamma``) and resets the running
    return to 0 at every token with ``response_mask`` 0, so tokens before a masked span (padding, or tool
    output in the middle of a response) receive nothing from the rewards after it. The advantages are G
    whitened over the batch's masked-in tokens (masked mean, unbiased variance). Returns
    ``(advantages, returns)``, both zero where ``response_mask`` is 0.
    """
    gamma = float(config.gamma)
    rewards = token_level_rewards.float()
    valid = response_mask.to(rewards.dtype)
    returns = torch.zeros_like(rewards)
    running = rewards.new_zeros(rewards.shape[0])
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running
        returns[:, t] = running
        running = running * valid[:, t]
    returns = returns * valid
    advantages = masked_whiten(returns, valid) * valid
    return advantages, returns


@torch.no_grad()
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline advantages: the reward minus its group's mean, whitened over the batch.

    With r the sum of a response's token-level rewards and the group the samples sharing an ``index``
    value: A = r − mean_g (mean 0 for a group of one, so A = r), broadcast over the response's masked-in
    tokens, then whitened over all masked-in tokens of the batch (masked mean, unbiased variance). Returns
    ``(A, A)``, zero where ``response_mask`` is 0.
    """
    scores = token_level_rewards.sum(dim=-1).float()
    stats = group_stats(scores, index)
    centred = torch.where(stats.size > 1, scores - stats.mean, scores)
    valid = response_mask.to(centred.dtype)
    advantages = masked_whiten(centred.unsqueeze(-1) * valid, valid) * valid
    return advantages, advantages.clone()
