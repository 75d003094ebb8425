"""Dtype names in configs (``bf16``, ``float32``, ``torch.float16`` ...) as torch dtypes: the one parser."""

from __future__ import annotations

from typing import Any

import torch

from rlcore.errors import RLCoreError

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
}


def parse_dtype(value: Any, key: str) -> torch.dtype:
    """A torch dtype from a config string such as ``bf16`` or ``float32``; errors name ``key``."""
    if isinstance(value, torch.dtype):
        return value
    name = str(value).lower().removeprefix("torch.")
    if name not in DTYPES:
        raise RLCoreError(f"{key}={value!r} is not a dtype; use one of {', '.join(sorted(DTYPES))}")
    return DTYPES[name]
