"""On-Policy RL with Optimal reward baseline (Hao et al., 2025): the baseline that minimises the variance
of the sequence-level policy gradient, approximated by the group's reward mean weighted by response length."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlcore.api import RLCoreError, group_ids


@torch.no_grad()
def compute_opo_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO advantages, one scalar per response broadcast over its tokens.

    With r_i the sum of response i's token-level rewards and |y_i| its number of valid tokens
    (``response_mask``): b_g = Σ_{j∈g} |y_j|·r_j / Σ_{j∈g} |y_j| over the responses sharing its ``index``
    value, and A_i = r_i − b_g. A group of one has baseline 0 (A = r), as in verl; a group whose responses
    are all empty has baseline 0 as well. Returns ``(A·mask, A·mask)``: the returns equal the advantages.
    """
    if len(index) != token_level_rewards.shape[0]:
        raise RLCoreError(
            f"index (uid) has {len(index)} entries for a batch of {token_level_rewards.shape[0]} responses"
        )
    mask = response_mask.to(torch.float64)
    scores = token_level_rewards.double().sum(dim=-1)
    lengths = mask.sum(dim=-1)
    ids = group_ids(index, device=scores.device)
    n_groups = int(ids.max().item()) + 1 if len(ids) else 0
    zeros = scores.new_zeros(n_groups)
    size = zeros.index_add(0, ids, torch.ones_like(scores))
    weighted = zeros.index_add(0, ids, lengths * scores)
    total_length = zeros.index_add(0, ids, lengths)
    baseline = torch.where((size > 1) & (total_length > 0), weighted / total_length.clamp_min(1.0), 0.0)
    advantages = (scores - baseline[ids]).to(torch.float32).unsqueeze(-1) * response_mask.to(torch.float32)
    return advantages, advantages.clone()
