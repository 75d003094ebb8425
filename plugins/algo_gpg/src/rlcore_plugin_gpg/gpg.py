"""Group Policy Gradient (Chu et al., 2025): the REINFORCE objective with a group-mean baseline and a batch
rescaling factor, optimised directly (no surrogate ratio, no clip, no critic)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlcore.api import ActorConfig, agg_loss, group_stats, masked_mean


@torch.no_grad()
def compute_gpg_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPG advantages, one scalar per response broadcast over its tokens.

    With r the sum of a response's token-level rewards, B the number of responses in the batch and the group
    the samples sharing an ``index`` value: α = B / max(1, number of responses with r ≠ 0) and
    A = α·(r − mean_g), with mean 0 for a group of one (so A = α·r). No std normalisation. Returns
    ``(A·mask, A·mask)``: the returns equal the advantages.
    """
    scores = token_level_rewards.sum(dim=-1).float()
    stats = group_stats(scores, index)
    alpha = len(scores) / max(1, int(torch.count_nonzero(scores).item()))
    advantages = alpha * torch.where(stats.size > 1, scores - stats.mean, scores)
    advantages = advantages.unsqueeze(-1) * response_mask.to(advantages.dtype)
    return advantages, advantages.clone()


def gpg_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The plain policy-gradient loss −logπ·A (times ``rollout_is_weights`` when given), aggregated by
    ``loss_agg_mode`` (``loss_scale_factor`` from ``config`` for ``seq-mean-token-sum-norm``).

    ``old_log_prob`` does not enter the loss; it gives the metric ``actor/ppo_kl`` (masked mean of
    logπ_old − logπ). Unlike a ratio loss, the value is not signed by A (logπ ≤ 0): only its gradient,
    −A·∇logπ, is meaningful.
    """
    token_loss = -log_prob * advantages
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights
    scale = None if config is None else config.loss_scale_factor
    loss = agg_loss(token_loss, response_mask, loss_agg_mode, scale)
    with torch.no_grad():
        ppo_kl = masked_mean((old_log_prob - log_prob).float(), response_mask)
    return loss, {"actor/ppo_kl": ppo_kl.item()}
