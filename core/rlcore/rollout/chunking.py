"""How the HF engine splits a generate call into chunks bounded by a token budget.

``actor_rollout_ref.rollout.max_num_batched_tokens`` is, for vLLM and SGLang, the most tokens one scheduler
step processes. The HF engine has no scheduler: it prefills a batch of prompts and decodes them together,
so its memory grows with rows x (prompt + response) tokens (the KV cache, the prefill's activations and
attention scores). For the HF engine the key is the most **prompt + response tokens resident at once**:
a generate call is decoded in consecutive chunks of ``max(1, budget // (P + R))`` rows, where ``P`` is the
padded prompt width and ``R`` the response length. Each chunk is also trimmed of the left-padding columns
that all of its rows share. Rows draw their randomness per row (:mod:`rlcore.rollout.row_noise`), so
chunking does not change the sampled tokens.
"""

from __future__ import annotations

from typing import Any

import torch

from rlcore.errors import RLCoreError
from rlcore.rollout.sampling import ROLLOUT_KEY

__all__ = ["chunk_slices", "token_budget", "trim_left_padding"]


def token_budget(config: Any) -> int | None:
    """``rollout.max_num_batched_tokens`` as a positive int, None when unset (no chunking), else an error
    naming the key."""
    value = config.get("max_num_batched_tokens")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise RLCoreError(f"{ROLLOUT_KEY}.max_num_batched_tokens must be a positive integer or null, got {value!r}")
    return value


def chunk_slices(rows: int, tokens_per_row: int, budget: int | None) -> list[slice]:
    """Consecutive row ranges of at most ``budget // tokens_per_row`` rows each (at least one row per chunk;
    one range of everything when ``budget`` is None)."""
    if rows == 0:
        return [slice(0, 0)]
    per_chunk = rows if budget is None else max(1, budget // max(1, tokens_per_row))
    return [slice(start, min(start + per_chunk, rows)) for start in range(0, rows, per_chunk)]


def trim_left_padding(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Drop the leading columns that are padding in every row of the left-padded prompts (at least one
    column is kept)."""
    filled = attention_mask.bool().any(dim=0)
    first = int(filled.int().argmax()) if bool(filled.any()) else max(0, attention_mask.shape[1] - 1)
    return input_ids[:, first:], attention_mask[:, first:], position_ids[:, first:]
