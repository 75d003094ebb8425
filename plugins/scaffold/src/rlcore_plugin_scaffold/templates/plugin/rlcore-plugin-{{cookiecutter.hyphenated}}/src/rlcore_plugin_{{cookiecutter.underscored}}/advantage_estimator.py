"""The advantage estimator ``{{ cookiecutter.hyphenated }}`` (``algorithm.adv_estimator={{ cookiecutter.hyphenated }}``).

What it computes: each response's reward minus the mean reward of its group (the responses sampled for
the same prompt, which share an ``index`` value). A response better than its siblings gets a positive
advantage on every one of its tokens, a worse one a negative advantage; a group whose rewards are all
equal gives zero, and a group of one response gives zero too, which is why ``hooks.py`` registers it with
``spec=AdvantageEstimatorSpec(min_group_size=2)``.

What to change: the body of :func:`compute_advantage`. Keep the signature: rlcore calls it with keyword
arguments (``token_level_rewards``, ``response_mask``, ``index``, ``config``, and ``values`` /
``reward_baselines`` when you declare ``needs_critic=True`` / ``needs_greedy_baseline=True`` in the
``AdvantageEstimatorSpec`` of ``hooks.py``; ``rlcore.api.components.AdvantageEstimator`` is the protocol). ``config`` is the typed ``algorithm`` section (``rlcore.api.AlgorithmConfig``: read ``config.gamma``); a key
of your own must be declared by a ``config_defaults`` section at ``algorithm``, and is then a field of
``config`` too. The returned tensors must be ``[B, R]``, finite and zero where
``response_mask`` is 0; ``tests/test_advantage_estimator.py`` runs rlcore's contract suite on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlcore.api import AlgorithmConfig


def group_ids(index: Sequence[Any], device: torch.device) -> torch.Tensor:
    """A dense integer id per sample: samples with the same ``index`` value (prompt uid) share one."""
    ids: dict[Any, int] = {}
    return torch.tensor([ids.setdefault(key, len(ids)) for key in index], dtype=torch.long, device=device)


@torch.no_grad()
def compute_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    config: AlgorithmConfig,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-mean-baseline advantages, one scalar per response broadcast over its valid tokens.

    With r the sum of a response's token-level rewards: A = r − mean of r over its group. Returns
    ``(A·mask, A·mask)``; the returns equal the advantages (no critic learns from them).
    """
    scores = token_level_rewards.sum(dim=-1).float()
    groups = group_ids(index, scores.device)
    n_groups = int(groups.max().item()) + 1 if len(groups) else 0
    sums = torch.zeros(n_groups, device=scores.device).index_add_(0, groups, scores)
    counts = torch.zeros(n_groups, device=scores.device).index_add_(0, groups, torch.ones_like(scores))
    advantages = (scores - (sums / counts)[groups]).unsqueeze(-1) * response_mask.to(scores.dtype)
    return advantages, advantages.clone()
