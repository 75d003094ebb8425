"""``trainer.balance_batch``: the row order that balances data-parallel ranks, and the partitioners."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from rlcore.api.batch import Batch
from rlcore.errors import RLCoreError
from rlcore.workers.balance import (
    balance_order,
    budget_partition,
    chunk_sizes,
    greedy_partition,
    sequence_workload,
)


def skewed_lengths(n: int, seed: int = 0) -> list[int]:
    """Mostly short sequences with a few very long ones, the long ones bunched at the start."""
    rng = random.Random(seed)
    long = [rng.randint(1500, 4000) for _ in range(n // 8)]
    short = [rng.randint(20, 300) for _ in range(n - len(long))]
    return long + short


def rank_workloads(lengths: list[int], order: list[int], world_size: int) -> list[int]:
    """Each rank's workload when the reordered rows are cut like a worker group cuts them."""
    sums, start = [], 0
    for size in chunk_sizes(len(lengths), world_size):
        sums.append(sum(sequence_workload(lengths[i]) for i in order[start : start + size]))
        start += size
    return sums


@pytest.mark.parametrize(("n", "world_size"), [(64, 4), (48, 8), (10, 3), (5, 4), (1, 2), (0, 2)])
def test_order_is_a_permutation_and_keeps_chunk_sizes(n: int, world_size: int) -> None:
    """Any length and world size: the order is a permutation; each rank's chunk keeps its size and its rows
    their original relative order."""
    lengths = skewed_lengths(n)
    order, metrics = balance_order(lengths, world_size)
    assert sorted(order) == list(range(n))
    start = 0
    for size in chunk_sizes(n, world_size):
        chunk = order[start : start + size]
        assert chunk == sorted(chunk)
        start += size
    assert set(metrics) == {
        "global_seqlen/min",
        "global_seqlen/max",
        "global_seqlen/minmax_diff",
        "global_seqlen/balanced_min",
        "global_seqlen/balanced_max",
        "global_seqlen/mean",
    }
    assert all(isinstance(value, float) for value in metrics.values())


def test_balance_beats_the_naive_split() -> None:
    """On skewed lengths the heaviest rank carries far less than with the naive split, close to the mean."""
    lengths, world_size = skewed_lengths(256), 8
    order, metrics = balance_order(lengths, world_size)
    naive = rank_workloads(lengths, list(range(len(lengths))), world_size)
    balanced = rank_workloads(lengths, order, world_size)
    mean = sum(naive) / world_size
    assert max(naive) > 2 * mean
    assert max(balanced) <= mean + max(sequence_workload(length) for length in lengths) / 2
    assert max(balanced) - min(balanced) < (max(naive) - min(naive)) / 10
    assert metrics["global_seqlen/balanced_max"] < metrics["global_seqlen/max"]
    assert (
        metrics["global_seqlen/balanced_max"] - metrics["global_seqlen/balanced_min"]
        < metrics["global_seqlen/minmax_diff"] / 10
    )
    assert metrics["global_seqlen/mean"] == pytest.approx(sum(lengths) / world_size)


def test_accepts_tensors_and_reorders_a_batch() -> None:
    """Lengths may be a tensor (``attention_mask.sum(-1)``); ``Batch.reorder(order)`` applies the order."""
    mask = torch.zeros(8, 10, dtype=torch.long)
    for row, length in enumerate([10, 9, 8, 7, 2, 2, 1, 1]):
        mask[row, :length] = 1
    batch = Batch.from_dict({"attention_mask": mask, "row": torch.arange(8)})
    order, _ = balance_order(mask.sum(-1), 2)
    assert order == balance_order(np.asarray(mask.sum(-1)), 2)[0]
    batch.reorder(order)
    per_rank = [int(part["attention_mask"].sum()) for part in batch.chunk(2)]
    assert per_rank == [20, 20]
    assert batch["row"].tolist() == order


def test_invalid_arguments_name_the_problem() -> None:
    """A non-positive world size or a negative length is an RLCoreError."""
    with pytest.raises(RLCoreError, match="data-parallel ranks"):
        balance_order([1, 2], 0)
    with pytest.raises(RLCoreError, match="non-negative"):
        balance_order([1, -2], 2)
    with pytest.raises(RLCoreError, match="add up"):
        greedy_partition([1.0, 2.0], 2, sizes=[1, 2])


def test_greedy_partition_sizes_and_balance() -> None:
    """Fixed sizes are respected; unconstrained bins are non-empty and within one item of the mean."""
    weights = [float(w) for w in skewed_lengths(40, seed=3)]
    parts = greedy_partition(weights, 4, sizes=[10, 10, 10, 10])
    assert [len(part) for part in parts] == [10] * 4
    parts = greedy_partition(weights, 6)
    sums = [sum(weights[i] for i in part) for part in parts]
    assert all(parts) and sorted(i for part in parts for i in part) == list(range(40))
    assert max(sums) <= sum(weights) / 6 + max(weights)


def test_budget_partition_uses_few_bins_within_the_budget() -> None:
    """Every bin fits the budget (an over-long item alone), with at most one bin more than the lower bound."""
    weights = [5, 5, 5, 5, 30, 1, 7, 3]
    parts = budget_partition(weights, 10)
    assert sorted(i for part in parts for i in part) == list(range(len(weights)))
    assert all(len(part) == 1 or sum(weights[i] for i in part) <= 10 for part in parts)
    assert [4] in parts
    lower = -(-sum(min(w, 10) for w in weights) // 10)
    assert lower <= len(parts) <= lower + 1
    assert len(budget_partition(weights, 10, min_bins=7)) == 7
    assert budget_partition([], 10) == []
