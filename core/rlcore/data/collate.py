"""Collate dataset rows into a :class:`rlcore.api.batch.Batch`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from rlcore.data import DataError


def collate_rows(rows: Sequence[Mapping[str, Any]]) -> Any:
    """Stack the rows' tensors along a new dim 0 and put every other field in a 1-D numpy object array.

    All rows must have the same keys, and a key must hold tensors in every row or in none. Object arrays
    are filled element by element, so list-valued fields (``raw_prompt_ids``, ``raw_prompt``) stay one
    Python object per sample instead of becoming a 2-D array.
    """
    from rlcore.api.batch import Batch

    if not rows:
        raise DataError("cannot collate an empty list of rows")
    keys = list(rows[0])
    for i, row in enumerate(rows[1:], start=1):
        if set(row) != set(keys):
            raise DataError(
                f"cannot collate rows with different keys: row 0 has {sorted(keys)}, row {i} has {sorted(row)}"
            )
    data: dict[str, Any] = {}
    for key in keys:
        values = [row[key] for row in rows]
        is_tensor = [isinstance(v, torch.Tensor) for v in values]
        if all(is_tensor):
            try:
                data[key] = torch.stack(values)
            except RuntimeError as exc:
                raise DataError(f"cannot stack key {key!r}: {exc}") from exc
        elif any(is_tensor):
            raise DataError(f"key {key!r} holds a tensor in some rows and not in others")
        else:
            array = np.empty(len(values), dtype=object)
            for i, value in enumerate(values):
                array[i] = value
            data[key] = array
    return Batch.from_dict(data)
