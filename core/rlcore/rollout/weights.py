"""Weight checksums shared by rollout engines and trainers: detect a weight sync that silently failed."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["float64_sum", "state_checksum"]


def float64_sum(tensors: Iterable[torch.Tensor]) -> float:
    """The float64 sum of all values of ``tensors`` (0.0 for none), each tensor summed on its device."""
    sums = [t.detach().to(torch.float64).sum().cpu() for t in tensors]
    return float(torch.stack(sums).sum()) if sums else 0.0


def _storage_key(tensor: torch.Tensor) -> tuple[Any, ...]:
    """Identifies the memory a tensor views: equal for a tensor registered under two names (tied weights)."""
    return (tensor.device, tensor.dtype, tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()))


def state_checksum(named_tensors: Iterable[tuple[str, torch.Tensor]], skip: Iterable[str] = ()) -> float:
    """The float64 sum of all values of a state dict, counting each distinct parameter once.

    This is the quantity a rollout engine's ``weight_checksum()`` reports, computed on the trainer's
    side. A tensor registered under several names (tied input/output embeddings share one storage) is
    counted once; names in ``skip`` are not counted at all (pass the engine's ``uncounted_names`` when
    the trainer's state dict holds tied weights as separate copies, or holds buffers).
    """
    skipped = set(skip)
    seen: set[tuple[Any, ...]] = set()
    distinct = []
    for name, tensor in named_tensors:
        if name in skipped:
            continue
        key = _storage_key(tensor)
        if key not in seen:
            seen.add(key)
            distinct.append(tensor)
    return float64_sum(distinct)
