"""GRPO's outcome advantage (Shao et al., 2024, DeepSeekMath): each response is scored against the other
responses to the same prompt, so no critic is needed."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from rlcore.errors import RLCoreError


def group_ids(index: Sequence[Any]) -> torch.Tensor:
    """Map each sample's group key (its prompt ``uid``) to a dense integer id, in order of first appearance."""
    ids: dict[Any, int] = {}
    return torch.tensor([ids.setdefault(key, len(ids)) for key in index], dtype=torch.long)


@torch.no_grad()
def compute_grpo_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    config: Mapping[str, Any] | None,
    epsilon: float = 1e-6,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO advantages, one scalar per response broadcast over its tokens.

    With r the sum of a response's token-level rewards and the group the samples that share an ``index``
    value: A = (r − mean_g) / (std_g + ``epsilon``), std_g being the unbiased (n − 1) standard deviation,
    or A = r − mean_g when ``config.norm_adv_by_std_in_grpo`` is false (Dr. GRPO). A singleton group has
    mean 0 and std 1, so its advantage is its reward. Returns ``(A·mask, A·mask)``: GRPO's returns are its
    advantages.
    """
    batch_size = token_level_rewards.shape[0]
    if len(index) != batch_size:
        raise RLCoreError(f"grpo: index (uid) has {len(index)} entries for a batch of {batch_size} responses")
    normalize = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    scores = token_level_rewards.sum(dim=-1).float()
    groups = group_ids(index).to(scores.device)
    n_groups = int(groups.max().item()) + 1 if batch_size else 0

    counts = torch.zeros(n_groups, device=scores.device).index_add_(0, groups, torch.ones_like(scores))
    means = torch.zeros(n_groups, device=scores.device).index_add_(0, groups, scores) / counts
    squares = torch.zeros(n_groups, device=scores.device).index_add_(0, groups, (scores - means[groups]) ** 2)
    stds = torch.sqrt(squares / (counts - 1).clamp_min(1.0))
    singleton = counts < 2
    means = torch.where(singleton, torch.zeros_like(means), means)
    stds = torch.where(singleton, torch.ones_like(stds), stds)

    advantages = scores - means[groups]
    if normalize:
        advantages = advantages / (stds[groups] + epsilon)
    advantages = advantages.unsqueeze(-1) * response_mask.to(advantages.dtype)
    if token_level_rewards.is_floating_point():
        advantages = advantages.to(token_level_rewards.dtype)
    return advantages, advantages.clone()
