"""How the HF engine splits a generate call into chunks of rows: by a token budget on CPU, by free memory on
an accelerator.

The HF engine has no scheduler: it prefills a chunk of prompts and decodes them together, so its memory
grows with rows x (prompt + response) tokens (the KV cache, the prefill's activations, the logits and
sampling temporaries of a step). Each chunk is trimmed of the left-padding columns that all of its rows
share. Rows draw their randomness per row (:mod:`rlcore_plugin_hf.row_noise`), so chunking does not change
the sampled tokens.

- **CPU** (:func:`chunk_slices`): ``actor_rollout_ref.rollout.max_num_batched_tokens`` is the most **prompt
  + response tokens resident at once** (for vLLM and SGLang the key is the most tokens one scheduler step
  processes): consecutive chunks of ``max(1, budget // (P + R))`` rows, ``P`` the padded prompt width and
  ``R`` the response length.
- **Accelerator** (:func:`memory_rows`, :func:`even_chunks`): the rows that fit in the memory the engine
  may use, ``rollout.gpu_memory_utilization`` x the device's memory minus what is in use (the weights,
  a colocated trainer's parameters and optimizer state, other processes), over the bytes one row needs
  (:func:`row_bytes`: its KV cache plus a margin for the prefill's activations and a step's logits).
  With CUDA graphs the row count is rounded down to a batch-size bucket (:func:`bucket`) and every
  chunk is padded up to its bucket, so one graph serves every chunk of that size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlcore.api import ROLLOUT_KEY, RLCoreError

if TYPE_CHECKING:
    import torch

    from rlcore.api import RolloutConfig

__all__ = [
    "chunk_slices",
    "describe_chunking",
    "even_chunks",
    "memory_rows",
    "memory_utilization",
    "read_length",
    "token_budget",
    "trim_left_padding",
]

#: a decoding step attends a prefix of the cache: one of this many read lengths (:func:`read_length`)
READ_BUCKETS = 8
#: read lengths are multiples of this many positions (or the whole cache)
READ_ALIGN = 16


def token_budget(config: RolloutConfig) -> int | None:
    """``rollout.max_num_batched_tokens`` as a positive int, None when unset (no chunking), else an error
    naming the key."""
    value = config.max_num_batched_tokens
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise RLCoreError(f"{ROLLOUT_KEY}.max_num_batched_tokens must be a positive integer or null, got {value!r}")
    return value


def memory_utilization(config: RolloutConfig) -> float:
    """``rollout.gpu_memory_utilization`` as a float in (0, 1], else an error naming the key."""
    value = config.gpu_memory_utilization
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise RLCoreError(f"{ROLLOUT_KEY}.gpu_memory_utilization must be a number in (0, 1], got {value!r}")
    return float(value)


def chunk_slices(rows: int, tokens_per_row: int, budget: int | None) -> list[slice]:
    """Consecutive row ranges of at most ``budget // tokens_per_row`` rows each (at least one row per chunk;
    one range of everything when ``budget`` is None)."""
    if rows == 0:
        return [slice(0, 0)]
    per_chunk = rows if budget is None else max(1, budget // max(1, tokens_per_row))
    return [slice(start, min(start + per_chunk, rows)) for start in range(0, rows, per_chunk)]


def even_chunks(rows: int, capacity: int) -> list[slice]:
    """Consecutive row ranges of at most ``capacity`` rows, as few as possible and of equal size (the
    first ones one row longer where it does not divide)."""
    if rows == 0:
        return [slice(0, 0)]
    count = -(-rows // max(1, capacity))
    size, extra = divmod(rows, count)
    bounds = [0]
    for index in range(count):
        bounds.append(bounds[-1] + size + (1 if index < extra else 0))
    return [slice(start, end) for start, end in zip(bounds, bounds[1:])]


def read_length(filled: int, cache_len: int) -> int:
    """The read-length bucket of a decoding step whose first ``filled`` cache positions are written: the
    smallest multiple of ``ceil(cache_len / READ_BUCKETS)`` (rounded up to :data:`READ_ALIGN`) that is at
    least ``filled``, capped at ``cache_len``. A cache has at most :data:`READ_BUCKETS` of them (one CUDA
    graph each), and a step reads at most one block more than what is filled."""
    block = -(-cache_len // READ_BUCKETS)
    block = -(-block // READ_ALIGN) * READ_ALIGN
    return min(cache_len, -(-max(1, filled) // block) * block)


def memory_rows(
    *,
    total: int,
    free: int,
    reserved: int,
    allocated: int,
    reusable: int,
    utilization: float,
    per_row: int,
) -> int:
    """The rows of a chunk that fit in the memory the engine may use on an accelerator (all in bytes).

    ``total`` and ``free`` are the device's (``torch.cuda.mem_get_info``), ``reserved`` and ``allocated``
    this process's caching allocator's (``memory_reserved`` / ``memory_allocated``), ``reusable`` what
    this engine holds already and will reuse (its KV cache from the last call). In use is ``total -
    free`` less this process's cached but unallocated memory less ``reusable`` (the weights, a colocated
    trainer's state, other processes); the engine may use ``utilization x total`` less that (with
    ``utilization`` ≤ 1 never more than is free, cached or reusable). Raises :class:`RLCoreError` naming
    ``rollout.gpu_memory_utilization`` when not even one row of ``per_row`` bytes fits.
    """
    in_use = total - free - max(0, reserved - allocated) - reusable
    allowed = utilization * total - in_use
    rows = int(allowed // per_row)
    if rows < 1:
        gib = 2.0**30
        raise RLCoreError(
            f"{ROLLOUT_KEY}.gpu_memory_utilization={utilization} leaves {max(0.0, allowed) / gib:.2f} GiB for the "
            f"HF engine's KV cache ({in_use / gib:.2f} GiB of {total / gib:.2f} GiB in use already), less than one "
            f"row needs ({per_row / gib:.3f} GiB): raise it, or shorten data.max_prompt_length / "
            f"{ROLLOUT_KEY}.response_length"
        )
    return rows


def device_memory_rows(device: torch.device, utilization: float, per_row: int, reusable: int) -> int:
    """:func:`memory_rows` with the current figures of the CUDA ``device``."""
    import torch

    free, total = torch.cuda.mem_get_info(device)
    return memory_rows(
        total=total,
        free=free,
        reserved=torch.cuda.memory_reserved(device),
        allocated=torch.cuda.memory_allocated(device),
        reusable=reusable,
        utilization=utilization,
        per_row=per_row,
    )


def trim_left_padding(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Drop the leading columns that are padding in every row of the left-padded prompts (at least one
    column is kept)."""
    filled = attention_mask.bool().any(dim=0)
    first = int(filled.int().argmax()) if bool(filled.any()) else max(0, attention_mask.shape[1] - 1)
    return input_ids[:, first:], attention_mask[:, first:], position_ids[:, first:]


def describe_chunking(config: Any) -> str | None:
    """The run plan's line for the HF engine's chunks (None for another engine): on CPU the rows per chunk
    that ``rollout.max_num_batched_tokens`` gives, on an accelerator the memory rule (the rows are only
    known at generate time: metric ``rollout/rows_per_chunk``) and whether steps run as CUDA graphs."""
    rollout = config.actor_rollout_ref.rollout
    if rollout.name != "hf":
        return None
    device = config.trainer.device
    prompt_len, response_len = int(rollout.prompt_length), int(rollout.response_length)
    budget = token_budget(rollout)
    utilization = memory_utilization(rollout)
    per_row = f"{prompt_len} + {response_len} tokens per row"
    if budget is None:
        cpu = f"on CPU one chunk per call ({ROLLOUT_KEY}.max_num_batched_tokens=null)"
    else:
        rows = max(1, budget // max(1, prompt_len + response_len))
        cpu = f"on CPU {rows} rows per chunk ({ROLLOUT_KEY}.max_num_batched_tokens={budget}, {per_row})"
    steps = (
        f"eager decoding steps ({ROLLOUT_KEY}.enforce_eager=true)"
        if rollout.enforce_eager
        else f"decoding steps replayed as CUDA graphs per batch-size bucket ({ROLLOUT_KEY}.enforce_eager=false)"
    )
    accelerator = (
        f"on an accelerator rows per chunk sized from free memory at generate time ({ROLLOUT_KEY}."
        f"gpu_memory_utilization={utilization} of the device less what is in use, over the KV cache "
        f"of {per_row} plus a step's margin; metric rollout/rows_per_chunk), {steps}"
    )
    parts = {"cpu": [cpu], "cuda": [accelerator]}.get(str(device), [cpu, accelerator])
    return "rollout chunks (hf engine): " + "; ".join(parts)
