"""How much memory a row of a generate call needs, and the batch-size buckets rows are rounded to: the rollout
memory arithmetic that the HF engine sizes its chunks with and ``rlcore plan`` predicts with (no torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CACHE_ALIGN", "STEP_VOCAB_COPIES", "ModelShape", "aligned_length", "bucket", "bucket_floor", "row_bytes"]

#: float32 ``[V]`` vectors per row alive during a sampling step (logits, scaled and filtered copies, the
#: noise's integer and float stages, the sum, log-softmax, top-p's sort buffers), with headroom
STEP_VOCAB_COPIES = 16
#: the cache length on an accelerator is rounded up to a multiple of this (aligned attention masks)
CACHE_ALIGN = 64


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
