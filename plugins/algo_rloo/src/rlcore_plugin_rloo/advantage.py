"""REINFORCE Leave-One-Out (Ahmadian et al., 2024): the baseline of a response is the mean reward of the
other responses to the same prompt, so no critic is needed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlcore.api import group_stats


@torch.no_grad()
def compute_rloo_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO advantages, one scalar per response broadcast over its tokens.

    With r the sum of a response's token-level rewards and n the size of its group (the samples sharing an
    ``index`` value): A = r − mean of the other n − 1 rewards = n/(n − 1)·(r − mean_g). A group of one has
    no other response, so its baseline is 0 and A = r (as verl's ``rloo``; verl's ``rloo_vectorized`` gives
    0 instead). Returns ``(A·mask, A·mask)``: the returns equal the advantages.
    """
    scores = token_level_rewards.sum(dim=-1).float()
    stats = group_stats(scores, index)
    scale = stats.size / (stats.size - 1).clamp_min(1.0)
    advantages = torch.where(stats.size > 1, scale * (scores - stats.mean), scores)
    advantages = advantages.unsqueeze(-1) * response_mask.to(advantages.dtype)
    return advantages, advantages.clone()
