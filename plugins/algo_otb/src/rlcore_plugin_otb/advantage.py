"""Optimal Token Baseline (arXiv:2602.07078): a per-token baseline for the policy gradient that weights each
response of a prompt's group by the "realized energy" it has accumulated up to that token.

The squared norm of ``∇_z log π(y_t)`` with respect to the logits ``z`` is ``‖e_{y_t} − π‖² = 1 − 2π(y_t) +
Σ_v π_v²`` (the logit-gradient proxy); its running sum along a response is the energy ``W_t``. The baseline
that minimises the variance of the token-level gradient estimate is then ``Σ_i G_t^i W_t^i / Σ_i W_t^i``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlcore.api import RLCoreError, group_ids

#: added to the baseline's denominator, as verl does
EPSILON = 1e-8


def _check_shapes(response_mask: torch.Tensor, index: Sequence[Any], **tensors: torch.Tensor | None) -> None:
    """Every given tensor has the mask's ``[B, R]`` shape and ``index`` has ``B`` entries; errors name them."""
    if len(index) != response_mask.shape[0]:
        raise RLCoreError(f"index (uid) has {len(index)} entries for a batch of {response_mask.shape[0]} responses")
    for name, tensor in tensors.items():
        if tensor is not None and tensor.shape != response_mask.shape:
            raise RLCoreError(
                f"optimal_token_baseline: {name} has shape {tuple(tensor.shape)}, the responses "
                f"{tuple(response_mask.shape)}"
            )


def _zero_tails(baselines: torch.Tensor, lengths: torch.Tensor, ids: torch.Tensor, size: torch.Tensor) -> None:
    """In each group of two or more, a response strictly longer than all the others gets baseline 0 from
    the second-longest length on (nothing to compare it with there)."""
    for group in torch.nonzero(size > 1).flatten().tolist():
        rows = torch.nonzero(ids == group).flatten()
        ordered = torch.sort(lengths[rows], descending=True).values
        longest, second = int(ordered[0]), int(ordered[1])
        if longest > second:
            baselines[rows[lengths[rows] == longest], second:] = 0.0


@torch.no_grad()
def compute_optimal_token_baseline_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: torch.Tensor | None = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OTB advantages and returns, both ``[B, R]``.

    With ``m`` the response mask, the reward-to-go ``G_t = Σ_{s≥t} r_s m_s``, the per-token energy
    ``w_t = 1 − 2·exp(old_log_probs_t) + sum_pi_squared_t`` (times ``rollout_is_weights_t²`` when given) and
    ``W_t = Σ_{s≤t} w_s m_s``: within the responses sharing an ``index`` value,
    ``B_t = Σ_i G_t W_t m_t / (Σ_i W_t m_t + 1e-8)``, except that a response strictly longer than the rest
    of its group gets ``B_t = 0`` from the second-longest length on, and a group of one has ``B = 0``.
    Returns ``((G − B)·m, G)``.
    """
    _check_shapes(
        response_mask,
        index,
        token_level_rewards=token_level_rewards,
        old_log_probs=old_log_probs,
        sum_pi_squared=sum_pi_squared,
        rollout_is_weights=rollout_is_weights,
    )
    mask = response_mask.to(torch.float64)
    returns = (token_level_rewards.double() * mask).flip(-1).cumsum(-1).flip(-1)
    energy = 1.0 - 2.0 * old_log_probs.double().exp() + sum_pi_squared.double()
    if rollout_is_weights is not None:
        energy = energy * rollout_is_weights.double() ** 2
    cumulative = (energy * mask).cumsum(-1)
    ids = group_ids(index, device=returns.device)
    n_groups = int(ids.max().item()) + 1 if len(ids) else 0
    size = torch.zeros(n_groups, dtype=torch.float64, device=returns.device).index_add(
        0, ids, torch.ones_like(ids, dtype=torch.float64)
    )
    zeros = returns.new_zeros(n_groups, returns.shape[1])
    numerator = zeros.index_add(0, ids, returns * cumulative * mask)
    denominator = zeros.index_add(0, ids, cumulative * mask) + EPSILON
    baselines = (numerator / denominator)[ids] * (size[ids] > 1).unsqueeze(-1)
    _zero_tails(baselines, mask.sum(-1).long(), ids, size)
    advantages = ((returns - baselines) * mask).to(torch.float32)
    return advantages, returns.to(torch.float32)
