"""Per-group statistics of sequence scores, shared by the group-relative advantage estimators.

A *group* is the set of responses that share an ``index`` value — the prompt's ``uid``, so the
``rollout.n`` samples of one prompt. Estimators such as GRPO, RLOO, REINFORCE++-baseline and GPG compare
each response's score with the other responses of its group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rlcore.errors import RLCoreError


def group_ids(index: Sequence[Any], device: torch.device | str | None = None) -> torch.Tensor:
    """Map each sample's group key (its prompt ``uid``) to a dense ``long`` id, in order of first appearance."""
    ids: dict[Any, int] = {}
    return torch.tensor([ids.setdefault(key, len(ids)) for key in index], dtype=torch.long, device=device)


@dataclass(frozen=True)
class GroupStats:
    """Statistics of the group each sample belongs to, one entry per sample (all ``[B]``).

    Attributes:
        ids: the dense group id of each sample (:func:`group_ids`).
        n_groups: the number of distinct groups.
        size: the number of samples in the sample's group (float, like the scores).
        mean: the group's mean score.
        std: the group's unbiased (n − 1) standard deviation, as ``torch.std``; 0 for a group of one.
    """

    ids: torch.Tensor
    n_groups: int
    size: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor


def group_stats(scores: torch.Tensor, index: Sequence[Any]) -> GroupStats:
    """Group sizes, means and unbiased standard deviations of the 1-D ``scores``, broadcast back per sample.

    Computed in float64 and returned in the scores' dtype, so that no finite float32 score overflows (the
    squares of scores above ~1e19 do not fit in float32).

    Raises :class:`~rlcore.errors.RLCoreError` when ``index`` does not have one entry per score.
    """
    if scores.dim() != 1:
        raise RLCoreError(f"group_stats expects one score per sample (1-D), got shape {tuple(scores.shape)}")
    if len(index) != scores.shape[0]:
        raise RLCoreError(f"index (uid) has {len(index)} entries for a batch of {scores.shape[0]} responses")
    ids = group_ids(index, device=scores.device)
    n_groups = int(ids.max().item()) + 1 if len(ids) else 0
    wide = scores.double()  # squares of float32 scores above ~1e19 overflow float32; float64 holds them all
    zeros = wide.new_zeros(n_groups)
    size = zeros.index_add(0, ids, torch.ones_like(wide))
    mean = zeros.index_add(0, ids, wide) / size.clamp_min(1.0)
    squares = zeros.index_add(0, ids, (wide - mean[ids]) ** 2)
    std = torch.sqrt(squares / (size - 1).clamp_min(1.0))
    dtype = scores.dtype if scores.is_floating_point() else torch.float32
    return GroupStats(
        ids=ids, n_groups=n_groups, size=size[ids].to(dtype), mean=mean[ids].to(dtype), std=std[ids].to(dtype)
    )
