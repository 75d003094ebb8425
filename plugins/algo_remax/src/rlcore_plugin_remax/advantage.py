"""ReMax (Li et al., 2024): REINFORCE whose baseline is the reward of the greedy response to the same prompt."""

from __future__ import annotations

from typing import Any

import torch

from rlcore.api import RLCoreError


@torch.no_grad()
def compute_remax_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    reward_baselines: torch.Tensor | None = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax advantages and returns, both ``[B, R]`` and zero where ``response_mask`` is 0.

    returns_t = Σ_{s ≥ t} r_s·m_s (the reverse cumulative sum of the masked-in rewards) and
    A_t = (returns_t − b)·m_t, where b is the sample's entry of ``reward_baselines`` ``[B]``: the score of
    the greedy response to its prompt, which the controller computes because the estimator is registered
    with ``needs_greedy_baseline=True``.
    """
    if reward_baselines is None:
        raise RLCoreError(
            "algorithm.adv_estimator=remax needs reward_baselines (the greedy response's reward); the estimator "
            "must be registered with needs_greedy_baseline=True so that the controller computes them"
        )
    valid = response_mask.to(torch.float32)
    rewards = token_level_rewards.float() * valid
    returns = rewards.flip(-1).cumsum(-1).flip(-1) * valid
    advantages = (returns - reward_baselines.float().unsqueeze(-1)) * valid
    return advantages, returns
