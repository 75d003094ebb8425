"""Left padding of token rows: how prompts reach an engine and a reward model (the last token at the right edge)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)`` of ``rows`` left-padded to ``width`` (default: the longest row)."""
    width = max((len(r) for r in rows), default=0) if width is None else width
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row) :] = 1
    return ids, mask
