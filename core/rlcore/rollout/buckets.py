"""Bucketed weight sync: the trainer's weights go to the rollout engine in buckets of a bounded size.

``actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes`` (verl's key) bounds how many
bytes of gathered weights a sync holds at once: the trainer gathers one bucket of full tensors, hands it on
and only then gathers the next. A tensor larger than a bucket travels alone, in a bucket of its own (tensors
are never split), so the bound is ``max(bucket, largest tensor)``. ``null`` (the default) sends the whole
state dict at once, as one bucket (:class:`rlcore.config.schema.CheckpointEngineConfig` reads the key).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import torch

#: what a bucket holds per name: a tensor, or a transport's encoding of one
Entry = TypeVar("Entry")

__all__ = ["RunningChecksum", "distinct_weights", "tensor_nbytes", "weight_buckets"]


def tensor_nbytes(tensor: torch.Tensor) -> int:
    """The bytes of ``tensor``'s values (from its shape and dtype, so also for a tensor not materialised)."""
    return tensor.numel() * tensor.element_size()


def weight_buckets(
    named_tensors: Iterable[tuple[str, Entry]],
    limit: int | None,
    size_of: Callable[[Entry], int] = tensor_nbytes,  # type: ignore[assignment]  # the default is for tensors
) -> Iterator[list[tuple[str, Entry]]]:
    """Group ``(name, tensor)`` pairs (or ``(name, entry)`` with an entry's ``size_of``), in order, into buckets
    whose ``size_of`` (bytes by default) sums to at most ``limit`` (None: one bucket).

    A tensor larger than ``limit`` is a bucket of its own. The pairs are consumed lazily: the next bucket
    is only gathered once the previous one has been handed on, so a generator of gathered tensors is never
    held in full."""
    bucket: list[tuple[str, Entry]] = []
    size = 0
    for name, tensor in named_tensors:
        tensor_size = size_of(tensor)
        if bucket and limit is not None and size + tensor_size > limit:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += tensor_size
    if bucket:
        yield bucket


def distinct_weights(state: Mapping[str, torch.Tensor]) -> Iterator[tuple[str, torch.Tensor]]:
    """The pairs of a state dict without tied aliases: a name whose tensor shares the storage of an earlier
    one (``lm_head.weight`` tied to the embeddings) is left out; rollout engines accept tied aliases as
    absent. ``state`` stays alive while this runs, so storages cannot be reused by new tensors."""
    seen: set[tuple[Any, ...]] = set()
    for name, tensor in state.items():
        key = (tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key in seen:
            continue
        seen.add(key)
        yield name, tensor


class RunningChecksum:
    """The trainer-side weight checksum (:func:`rlcore.rollout.weights.state_checksum`) of a stream of
    distinct tensors, added bucket by bucket: the float64 sum of every value cast to the engine's
    ``dtype``, leaving out the engine's ``skip`` names."""

    def __init__(self, dtype: torch.dtype, skip: Iterable[str] = ()) -> None:
        self.dtype = dtype
        self.skip = frozenset(skip)
        self.value = 0.0

    def add(self, bucket: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Add the values of one bucket's tensors."""
        for name, tensor in bucket:
            if name not in self.skip:
                self.value += float(tensor.detach().to(self.dtype).to(torch.float64).sum())
