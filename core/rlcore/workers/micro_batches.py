"""Micro-batches: fixed row counts, or a token budget per micro-batch (``use_dynamic_bsz``).

With a token budget the rows are split into the fewest micro-batches whose summed valid lengths
(``attention_mask`` sums) stay within the budget, balanced by a longest-first greedy partition
(:func:`rlcore.workers.balance.budget_partition`): the budget is a strict upper bound of every micro-batch, and
a row longer than the budget is an error naming the budget key (verl 0.9.1, its PR #7553; before, such a row ran
as a micro-batch of its own). Every rank must run the same number of forward passes
(sharded engines gather parameters in every pass), so the micro-batch count is agreed with an all-reduce (max) over
the ranks. Results computed per micro-batch are put back into the original row order.

``grouped`` (``actor.use_prefix_grouper``) makes each run of adjacent rows sharing a prompt one indivisible
unit of the token budget, weighed by the tokens the shared-prompt forward runs (the prompt once, then every
response: :mod:`rlcore.modelkit.prefix_grouper`), so that no micro-batch splits a prompt's group.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from rlcore.api.batch import Batch
from rlcore.errors import RLCoreError
from rlcore.modelkit.prefix_grouper import prompt_groups
from rlcore.workers.balance import budget_partition


@dataclass(frozen=True)
class MicroBatchPlan:
    """How one batch is cut into micro-batches.

    Attributes:
        parts: the micro-batches, in the order they run.
        order: the row of the batch that each row of the concatenated micro-batches came from, or None
            when the micro-batches are consecutive slices (nothing to restore).
    """

    parts: list[Batch]
    order: torch.Tensor | None

    def restore(self, outputs: list[torch.Tensor]) -> torch.Tensor:
        """Concatenate per-micro-batch ``outputs`` and put their rows back into the batch's order."""
        stacked = torch.cat(outputs)
        if self.order is None:
            return stacked
        restored = torch.empty_like(stacked)
        restored[self.order.to(stacked.device)] = stacked
        return restored


def _all_reduce_max(value: int, device: torch.device) -> int:
    """The largest ``value`` over all ranks (``value`` itself without a process group of several ranks)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.long, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def token_budget_parts(lengths: list[int], budget: int, device: torch.device) -> list[list[int]]:
    """Row indices of each micro-batch: the fewest balanced parts within ``budget`` tokens, with the part
    count raised to the largest any rank needs (every rank must call this, collectively)."""
    parts = budget_partition(lengths, budget)
    while True:
        agreed = _all_reduce_max(len(parts), device)
        if agreed > len(lengths):
            raise RLCoreError(
                f"dynamic batching: another rank needs {agreed} micro-batches but this rank has only "
                f"{len(lengths)} rows; every rank must receive the same number of rows"
            )
        if agreed != len(parts):
            parts = budget_partition(lengths, budget, min_bins=agreed)
        if _all_reduce_max(len(parts), device) == agreed:
            return parts


def _budget_units(batch: Batch, grouped: bool) -> tuple[list[list[int]], list[int]]:
    """The rows of each unit of the token budget and its token count: one row each, or with ``grouped`` each
    run of adjacent rows sharing a prompt, counting the prompt's tokens once."""
    mask = batch["attention_mask"]
    if not grouped:
        return [[row] for row in range(len(batch))], mask.sum(-1).clamp_min(1).tolist()
    prompt = mask.shape[1] - batch["responses"].shape[1]
    units, lengths = [], []
    for start, count in prompt_groups(batch):
        units.append(list(range(start, start + count)))
        lengths.append(max(1, int(mask[start, :prompt].sum() + mask[start : start + count, prompt:].sum())))
    return units, lengths


def plan_micro_batches(
    batch: Batch,
    *,
    size: int | None = None,
    budget: int | None = None,
    budget_key: str = "",
    device: torch.device,
    grouped: bool = False,
) -> MicroBatchPlan:
    """Cut ``batch`` into micro-batches of ``size`` rows (all of it when ``size`` is None) or, when
    ``budget`` is given, by a token budget (see the module docstring; collective over the ranks), keeping
    the rows of a prompt together when ``grouped``.

    ``budget_key`` names the budget's config key in the error about a row (or, ``grouped``, a prompt's group)
    longer than the budget.
    """
    if budget is None:
        parts = [batch] if size is None or size >= len(batch) else batch.split(size)
        return MicroBatchPlan(parts, None)
    units, lengths = _budget_units(batch, grouped)
    longest = _all_reduce_max(max(lengths, default=0), device)  # every rank raises, none waits in a collective
    if longest > budget:
        what = "a prompt's group" if grouped else "a sequence"
        raise RLCoreError(
            f"dynamic batching: {what} of {longest} tokens exceeds {budget_key}={budget}, which bounds every "
            f"micro-batch (as in verl 0.9.1); raise it to at least {longest}"
        )
    unit_parts = token_budget_parts(lengths, budget, device)
    rows = [torch.tensor([row for unit in part for row in units[unit]], dtype=torch.long) for part in unit_parts]
    order = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.long)
    return MicroBatchPlan([batch.index(index) for index in rows], order)
