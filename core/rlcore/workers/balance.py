"""Balanced partitions of sequences: ``trainer.balance_batch`` and token-budget micro-batches.

:func:`balance_order` reorders a step's batch so that, once the worker group cuts it into equal chunks
(one per data-parallel rank, in order), every rank gets about the same amount of work.
:func:`greedy_partition` is the partitioner behind it (and behind the FSDP backend's dynamic
micro-batches): longest-processing-time-first, each item to the lightest bin that still has room.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from typing import Any

from rlcore.errors import RLCoreError

#: verl's per-sequence workload estimate is ``24576·L + L²`` (linear layers + attention of a length-L
#: sequence, in units where the hidden-size factor is folded into the constant)
WORKLOAD_LINEAR_COEF = 24576


def sequence_workload(length: int) -> int:
    """The estimated compute of one sequence of ``length`` tokens: ``24576·L + L²`` (verl's estimate)."""
    return WORKLOAD_LINEAR_COEF * length + length * length


def greedy_partition(weights: Sequence[float], bins: int, sizes: Sequence[int] | None = None) -> list[list[int]]:
    """Split item indices ``0 … len(weights)−1`` into ``bins`` bins with balanced weight sums.

    Longest-processing-time-first: items in order of decreasing weight (ties by index) go to the bin
    with the smallest sum (ties by bin index) that still has room. With ``sizes``, bin ``b`` holds exactly
    ``sizes[b]`` items; without, bins are unconstrained and the heaviest exceeds the mean by at most one
    item's weight. Deterministic, so every rank computes the same partition from the same input. Each
    bin's indices are returned in increasing order. Unconstrained bins are all non-empty when there are at
    least as many items as bins and every weight is positive.

    Raises:
        RLCoreError: ``bins`` is not positive, or ``sizes`` has another length, a negative entry or does
            not add up to the number of items.
    """
    if bins < 1:
        raise RLCoreError(f"cannot partition into {bins} bins")
    if sizes is None:
        sizes = [len(weights)] * bins
    elif len(sizes) != bins or any(size < 0 for size in sizes) or sum(sizes) != len(weights):
        raise RLCoreError(
            f"cannot partition {len(weights)} items into {bins} bins of sizes {list(sizes)}: the sizes must be "
            "non-negative and add up to the number of items"
        )
    parts: list[list[int]] = [[] for _ in range(bins)]
    heap = [(0.0, b) for b in range(bins) if sizes[b] > 0]
    heapq.heapify(heap)
    for item in sorted(range(len(weights)), key=lambda i: (-weights[i], i)):
        load, b = heapq.heappop(heap)
        parts[b].append(item)
        if len(parts[b]) < sizes[b]:
            heapq.heappush(heap, (load + weights[item], b))
    return [sorted(members) for members in parts]


def chunk_sizes(n: int, chunks: int) -> list[int]:
    """How many of ``n`` rows each of ``chunks`` ranks receives when a worker group pads the batch to a
    multiple of ``chunks`` (with copies of its first rows) and cuts it into equal consecutive chunks."""
    size = -(-n // chunks) if n else 0
    return [max(0, min(size, n - rank * size)) for rank in range(chunks)]


def _as_lengths(seq_lengths: Any) -> list[int]:
    """Sequence lengths from a list, numpy array or 1-D tensor, as python ints."""
    values = seq_lengths.tolist() if hasattr(seq_lengths, "tolist") else list(seq_lengths)
    lengths = [int(v) for v in values]
    if any(length < 0 for length in lengths):
        raise RLCoreError(f"sequence lengths must be non-negative, got {min(lengths)}")
    return lengths


def _rank_sums(lengths: Sequence[int], order: Sequence[int], sizes: Sequence[int]) -> list[int]:
    """The total tokens of each rank's chunk when rows are taken in ``order`` and cut by ``sizes``."""
    sums, start = [], 0
    for size in sizes:
        sums.append(sum(lengths[i] for i in order[start : start + size]))
        start += size
    return sums


def balance_order(seq_lengths: Iterable[int], world_size: int) -> tuple[list[int], dict[str, float]]:
    """A row order that balances the data-parallel ranks' work (``trainer.balance_batch``).

    ``seq_lengths`` holds each row's valid token count (``attention_mask.sum(-1)``). Returns ``order``,
    a permutation of the rows for ``batch.reorder(order)``: after it, the worker group's equal chunks
    (rank ``r`` gets consecutive rows ``r·s … (r+1)·s − 1``, ``s = ⌈n / world_size⌉``) have about equal
    total workload ``Σ 24576·L + L²`` (verl's estimate; for the short sequences of most RL runs it is
    proportional to the token count). Each chunk keeps the size the worker group gives it and its rows
    keep their original relative order. The rows a worker group appends as padding when ``n`` is not a
    multiple of ``world_size`` are not counted.

    Also returns metrics on per-rank token totals: ``global_seqlen/min``, ``/max``, ``/minmax_diff`` (of
    the unbalanced, original order), ``/balanced_min``, ``/balanced_max`` (after reordering) and
    ``/mean``.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise RLCoreError(f"balance_batch needs a positive number of data-parallel ranks, got {world_size!r}")
    lengths = _as_lengths(seq_lengths)
    sizes = chunk_sizes(len(lengths), world_size)
    bins = greedy_partition([sequence_workload(length) for length in lengths], world_size, sizes)
    order = [row for members in bins for row in members]
    return order, _balance_metrics(lengths, order, sizes, world_size)


def group_balance_order(
    seq_lengths: Iterable[int], groups: Sequence[object], world_size: int
) -> tuple[list[int], dict[str, float]]:
    """:func:`balance_order` that keeps the rows of each group (``uid``: the samples of one prompt) adjacent and
    on one rank (``actor.use_prefix_grouper``): whole groups are balanced over the ranks when there are as many
    on every rank (equal group sizes, a group count that the rank count divides, as verl requires); otherwise
    the groups only come together, in the order of their first rows, without balancing. Same metrics."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise RLCoreError(f"balance_batch needs a positive number of data-parallel ranks, got {world_size!r}")
    lengths = _as_lengths(seq_lengths)
    if len(groups) != len(lengths):
        raise RLCoreError(f"balance_batch: {len(groups)} group ids for {len(lengths)} rows")
    members: dict[object, list[int]] = {}
    for row, group in enumerate(groups):
        members.setdefault(group, []).append(row)
    units = list(members.values())
    sizes = chunk_sizes(len(lengths), world_size)
    order = [row for unit in units for row in unit]
    if world_size > 1 and len({len(unit) for unit in units}) == 1 and len(units) % world_size == 0:
        weights = [sum(sequence_workload(lengths[row]) for row in unit) for unit in units]
        bins = greedy_partition(weights, world_size, [len(units) // world_size] * world_size)
        order = [row for members_ in bins for unit in members_ for row in units[unit]]
    return order, _balance_metrics(lengths, order, sizes, world_size)


def _balance_metrics(lengths: list[int], order: list[int], sizes: list[int], world_size: int) -> dict[str, float]:
    """``global_seqlen/*``: per-rank token totals in the original and the balanced ``order``."""
    before = _rank_sums(lengths, range(len(lengths)), sizes)
    after = _rank_sums(lengths, order, sizes)
    return {
        "global_seqlen/min": float(min(before)),
        "global_seqlen/max": float(max(before)),
        "global_seqlen/minmax_diff": float(max(before) - min(before)),
        "global_seqlen/balanced_min": float(min(after)),
        "global_seqlen/balanced_max": float(max(after)),
        "global_seqlen/mean": sum(lengths) / world_size if lengths else 0.0,
    }


def budget_partition(weights: Sequence[int], budget: int, min_bins: int = 1) -> list[list[int]]:
    """The fewest non-empty bins, at least ``min_bins``, into which :func:`greedy_partition` splits the
    items with every bin's weight sum within ``budget``; an item heavier than ``budget`` gets a bin of
    its own. ``min_bins`` is capped at the number of items (an empty input gives no bins).

    The bin count starts at ``max(min_bins, ⌈Σ min(weight, budget) / budget⌉)`` and grows until the greedy
    partition fits (at worst one item per bin).
    """
    n = len(weights)
    if n == 0:
        return []
    if budget < 1:
        raise RLCoreError(f"a token budget must be positive, got {budget}")
    bins = min(n, max(min_bins, math.ceil(sum(min(w, budget) for w in weights) / budget)))
    while True:
        parts = greedy_partition(weights, bins)
        if bins == n or all(len(part) == 1 or sum(weights[i] for i in part) <= budget for part in parts):
            return parts
        bins += 1
