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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlcore.api import ROLLOUT_KEY, RLCoreError

if TYPE_CHECKING:
    import torch

__all__ = [
    "ModelShape",
    "bucket",
    "bucket_floor",
    "chunk_slices",
    "describe_chunking",
    "even_chunks",
    "memory_rows",
    "memory_utilization",
    "read_length",
    "row_bytes",
    "token_budget",
    "trim_left_padding",
]

#: float32 ``[V]`` vectors per row alive during a sampling step (logits, scaled and filtered copies, the
#: noise's integer and float stages, the sum, log-softmax, top-p's sort buffers), with headroom
STEP_VOCAB_COPIES = 16
#: the cache length on an accelerator is rounded up to a multiple of this (aligned attention masks)
CACHE_ALIGN = 64
#: a decoding step attends a prefix of the cache: one of this many read lengths (:func:`read_length`)
READ_BUCKETS = 8
#: read lengths are multiples of this many positions (or the whole cache)
READ_ALIGN = 16


def token_budget(config: Any) -> int | None:
    """``rollout.max_num_batched_tokens`` as a positive int, None when unset (no chunking), else an error
    naming the key."""
    value = config.get("max_num_batched_tokens")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise RLCoreError(f"{ROLLOUT_KEY}.max_num_batched_tokens must be a positive integer or null, got {value!r}")
    return value


def memory_utilization(config: Any) -> float:
    """``rollout.gpu_memory_utilization`` as a float in (0, 1], else an error naming the key."""
    value = config.get("gpu_memory_utilization", 0.5)
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


def bucket(rows: int) -> int:
    """The batch-size bucket of ``rows`` (a CUDA graph per bucket): the smallest of 1, 2, 4, 8, then the
    multiples of 16 up to 256, then the multiples of 64, that is at least ``rows``."""
    if rows <= 8:
        return 1 << max(0, rows - 1).bit_length()
    step = 16 if rows <= 256 else 64
    return -(-rows // step) * step


def bucket_floor(rows: int) -> int:
    """The largest bucket (:func:`bucket`) not above ``rows`` (at least 1)."""
    if rows < 16:
        return 1 << (max(1, rows).bit_length() - 1)
    return rows // 16 * 16 if rows <= 256 else rows // 64 * 64


def read_length(filled: int, cache_len: int) -> int:
    """The read-length bucket of a decoding step whose first ``filled`` cache positions are written: the
    smallest multiple of ``ceil(cache_len / READ_BUCKETS)`` (rounded up to :data:`READ_ALIGN`) that is at
    least ``filled``, capped at ``cache_len``. A cache has at most :data:`READ_BUCKETS` of them (one CUDA
    graph each), and a step reads at most one block more than what is filled."""
    block = -(-cache_len // READ_BUCKETS)
    block = -(-block // READ_ALIGN) * READ_ALIGN
    return min(cache_len, -(-max(1, filled) // block) * block)


def aligned_length(tokens: int) -> int:
    """The KV-cache length for ``tokens`` positions on an accelerator: rounded up to :data:`CACHE_ALIGN`."""
    return -(-tokens // CACHE_ALIGN) * CACHE_ALIGN


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only transformer that its generation memory depends on."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def of(cls, config: Any) -> ModelShape:
        """The shape of a ``transformers`` config (a vision-language model's text config)."""
        config = getattr(config, "text_config", None) or config
        heads = int(config.num_attention_heads)
        hidden = int(config.hidden_size)
        return cls(
            layers=int(config.num_hidden_layers),
            hidden=hidden,
            intermediate=int(getattr(config, "intermediate_size", None) or 4 * hidden),
            heads=heads,
            kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
            head_dim=int(getattr(config, "head_dim", None) or hidden // heads),
            vocab=int(config.vocab_size),
        )


def row_bytes(shape: ModelShape, prompt_len: int, cache_len: int, dtype_bytes: int) -> int:
    """Bytes one row of a chunk needs while it is generated:

    - its KV cache, ``2 x layers x kv_heads x head_dim x dtype_bytes x cache_len``;
    - the prefill's activations for its ``prompt_len`` tokens (one layer at a time: the hidden state and
      residual, the q/k/v projection, gate/up and the gated product, the boolean and float attention
      masks of its query groups);
    - a decoding step's logits and sampling temporaries, :data:`STEP_VOCAB_COPIES` float32 vectors of
      the vocabulary.
    """
    kv = 2 * shape.layers * shape.kv_heads * shape.head_dim * dtype_bytes * cache_len
    projections = (shape.heads + 2 * shape.kv_heads) * shape.head_dim
    per_token = (4 * shape.hidden + projections + 3 * shape.intermediate) * dtype_bytes
    groups = max(1, shape.heads // shape.kv_heads)
    masks = groups * prompt_len * prompt_len * 5
    return kv + prompt_len * per_token + masks + STEP_VOCAB_COPIES * 4 * shape.vocab


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
    from omegaconf import OmegaConf

    rollout = OmegaConf.select(config, ROLLOUT_KEY)
    if rollout is None or rollout.get("name", "hf") != "hf":
        return None
    device = OmegaConf.select(config, "trainer.device", default="auto")
    prompt_len, response_len = int(rollout.get("prompt_length") or 0), int(rollout.get("response_length") or 0)
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
        if rollout.get("enforce_eager", False)
        else f"decoding steps replayed as CUDA graphs per batch-size bucket ({ROLLOUT_KEY}.enforce_eager=false)"
    )
    accelerator = (
        f"on an accelerator rows per chunk sized from free memory at generate time ({ROLLOUT_KEY}."
        f"gpu_memory_utilization={utilization} of the device less what is in use, over the KV cache "
        f"of {per_row} plus a step's margin; metric rollout/rows_per_chunk), {steps}"
    )
    parts = {"cpu": [cpu], "cuda": [accelerator]}.get(str(device), [cpu, accelerator])
    return "rollout chunks (hf engine): " + "; ".join(parts)
