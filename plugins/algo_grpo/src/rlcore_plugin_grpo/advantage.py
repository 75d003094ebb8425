"""GRPO's outcome advantage (Shao et al., 2024, DeepSeekMath): each response is scored against the other
responses to the same prompt, so no critic is needed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlcore.api import RLCoreError, group_stats
from rlcore_plugin_grpo.config import GRPOAlgorithmConfig


def _normalize_by_std(config: GRPOAlgorithmConfig | None) -> bool:
    """``config.norm_adv_by_std_in_grpo`` (None: the section's default)."""
    return bool((config or GRPOAlgorithmConfig()).norm_adv_by_std_in_grpo)


def _broadcast(
    per_sample: torch.Tensor, token_level_rewards: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """One scalar per response spread over its tokens, zero where ``response_mask`` is 0, in the rewards' dtype."""
    advantages = per_sample.unsqueeze(-1) * response_mask.to(per_sample.dtype)
    if token_level_rewards.is_floating_point():
        advantages = advantages.to(token_level_rewards.dtype)
    return advantages


@torch.no_grad()
def compute_grpo_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    config: GRPOAlgorithmConfig | None,
    epsilon: float = 1e-6,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO advantages, one scalar per response broadcast over its tokens.

    With r the sum of a response's token-level rewards over ``response_mask`` (values on masked-out tokens, such
    as a multi-turn rollout's tool output, are ignored) and the group the samples that share an ``index``
    value: A = (r − mean_g) / (std_g + ``epsilon``), std_g being the unbiased (n − 1) standard deviation,
    or A = r − mean_g when ``config.norm_adv_by_std_in_grpo`` is false (Dr. GRPO). A singleton group has
    mean 0 and std 1, so its advantage is its reward. Returns ``(A·mask, A·mask)``: GRPO's returns are its
    advantages.
    """
    scores = (token_level_rewards * response_mask).sum(dim=-1).float()  # tool tokens (mask 0) carry no reward
    advantages = _broadcast(group_relative(scores, index, config, epsilon), token_level_rewards, response_mask)
    return advantages, advantages.clone()


def group_relative(
    scores: torch.Tensor, index: Sequence[Any], config: GRPOAlgorithmConfig | None, epsilon: float
) -> torch.Tensor:
    """GRPO's per-response advantage of the scores ``[B]``: (r − mean_g) / (std_g + ``epsilon``), or r − mean_g
    when ``config.norm_adv_by_std_in_grpo`` is false; a singleton group has mean 0 and std 1."""
    stats = group_stats(scores, index)
    singleton = stats.size < 2
    means = torch.where(singleton, torch.zeros_like(stats.mean), stats.mean)
    stds = torch.where(singleton, torch.ones_like(stats.std), stats.std)
    advantages = scores - means
    if _normalize_by_std(config):
        advantages = advantages / (stds + epsilon)
    return advantages


@torch.no_grad()
def compute_grpo_passk_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    config: GRPOAlgorithmConfig | None,
    epsilon: float = 1e-6,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k advantages (Tang et al., 2025, arXiv:2503.19595): only the best response of each group learns.

    In each group (samples sharing an ``index`` value) the response with the highest reward r_max (the first
    one on a tie) gets A = r_max − r_2nd, the margin over the second-best reward, divided by
    (std_g + ``epsilon``) when ``config.norm_adv_by_std_in_grpo`` is true (std_g unbiased); every other
    response gets 0. Broadcast over response tokens and zero where ``response_mask`` is 0; the returns
    equal the advantages. Raises :class:`~rlcore.errors.RLCoreError` when a group has fewer than 2 samples.
    """
    scores = (token_level_rewards * response_mask).sum(dim=-1).float()  # tool tokens (mask 0) carry no reward
    stats = group_stats(scores, index)
    if bool((stats.size < 2).any()):
        row = int(torch.nonzero(stats.size < 2)[0].item())
        raise RLCoreError(
            f"algorithm.adv_estimator=grpo_passk needs at least 2 responses per prompt, but the group of "
            f"uid {index[row]!r} has {int(stats.size[row].item())}; set actor_rollout_ref.rollout.n >= 2"
        )
    ids, n_groups = stats.ids, stats.n_groups
    best = scores.new_full((n_groups,), -torch.inf).scatter_reduce(0, ids, scores, "amax")
    rows = torch.arange(len(scores), device=scores.device)
    at_best = scores == best[ids]
    first_best = torch.full((n_groups,), len(scores), device=scores.device).scatter_reduce(
        0, ids[at_best], rows[at_best], "amin"
    )
    winner = torch.zeros_like(at_best).index_fill(0, first_best, True)
    runner_up = scores.new_full((n_groups,), -torch.inf).scatter_reduce(
        0, ids, scores.masked_fill(winner, -torch.inf), "amax"
    )
    margin = torch.where(winner, best[ids] - runner_up[ids], torch.zeros_like(scores))
    if _normalize_by_std(config):
        margin = margin / (stats.std + epsilon)
    advantages = _broadcast(margin, token_level_rewards, response_mask)
    return advantages, advantages.clone()
