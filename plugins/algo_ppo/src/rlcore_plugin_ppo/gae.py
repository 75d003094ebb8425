"""Generalized advantage estimation (Schulman et al., 2016) over response tokens, as used by PPO."""

from __future__ import annotations

from typing import Any

import torch

from rlcore.api import AlgorithmConfig, RLCoreError, masked_whiten


@torch.no_grad()
def compute_gae(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: AlgorithmConfig,
    values: torch.Tensor | None = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE advantages and returns, both ``[B, R]`` and zero where ``response_mask`` is 0.

    A reverse scan over the response computes δ_t = r_t + γ·V' − V_t and A_t = δ_t + γλ·A', where V' and
    A' are the value and advantage of the next *masked-in* token (0 past the end): tokens with mask 0
    (padding, tool output) are skipped, and whatever rewards or values they hold never reach a masked-in
    token. returns = A + V is taken before A is whitened over the batch's masked-in tokens. γ and λ are
    ``config.gamma`` and ``config.lam`` (the ``algorithm`` section's).
    """
    if values is None:
        raise RLCoreError(
            "algorithm.adv_estimator=gae needs critic values; the critic was not run (check critic.enable)"
        )
    gamma, lam = float(config.gamma), float(config.lam)
    rewards = token_level_rewards.float()
    values = values.float()
    valid = response_mask.bool()
    batch_size, length = rewards.shape

    next_value = rewards.new_zeros(batch_size)
    next_advantage = rewards.new_zeros(batch_size)
    advantages = torch.zeros_like(rewards)
    for t in reversed(range(length)):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        next_value = torch.where(valid[:, t], values[:, t], next_value)
        next_advantage = torch.where(valid[:, t], advantage, next_advantage)
        advantages[:, t] = next_advantage

    zero = torch.zeros_like(advantages)
    returns = torch.where(valid, advantages + values, zero)
    advantages = torch.where(valid, masked_whiten(advantages, valid), zero)
    return advantages, returns
