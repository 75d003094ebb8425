"""Attention over a packed row without an ``nnz × nnz`` mask (``model.use_remove_padding``).

A packed micro-batch (:mod:`rlcore.modelkit.packing`) is one row ``(1, T)`` holding several sequences. Given
only restarting position ids, transformers' ``sdpa`` attention builds one dense block-diagonal causal mask
``[1, 1, T, T]`` for it and runs a masked kernel over every tile: O(T²) time and memory per layer call where
the sequences need Σ s². Here the sequences' lengths, known when the batch is packed, travel to the attention
as a :class:`PackedSequences` in place of that mask, and every layer attends within each sequence with a
causal kernel and no mask at all. :func:`kernel` picks one by what the device and the installed torch offer:

- ``varlen``: on CUDA, in float16/bfloat16, without dropout, on a GPU that runs flash attention (compute
  capability 8.0 or newer, head dimension a multiple of 8 up to 256) and with torch's variable-length flash
  attention (``torch.nn.attention.varlen.varlen_attn``, torch 2.9 or newer): the packed row as it is, with the
  sequences' cumulative lengths.
- ``sdpa`` (everywhere else: the CPU, float32, dropout): the sequences are gathered into buckets of similar
  length, each bucket a batch of right-padded rows, and ``scaled_dot_product_attention`` runs once per bucket
  with ``is_causal=True``. Under a causal mask the right padding is never seen by a real token, so the real
  tokens' outputs and every gradient are those of attending each sequence alone (padding slots repeat their
  sequence's last token; their outputs are dropped, so they add nothing to any gradient). A bucket holds the sequences at
  least 3/4 as long as its longest one, so the work is at most 16/9 of Σ s² and a micro-batch whose lengths
  span a factor ``r`` needs about ``1 + log(r) / log(4/3)`` kernel calls per layer.

Sliding-window layers attend within their window: ``varlen`` through its window size, ``sdpa`` with a band
mask per bucket (``[L, L]`` for a bucket of width ``L``, never ``[T, T]``).

How a model gets it: :func:`packed_forward` is opened around the model call of a packed micro-batch. The
first time, it switches a model whose attention implementation is ``sdpa`` (transformers' default) to
:data:`ATTENTION_NAME`, registered in transformers' ``AttentionInterface`` and ``AttentionMaskInterface``: for
every other input (padded batches, ready 4-D masks, the vision tower of a vision-language model) it is
``sdpa`` itself, mask included. While the block is open its mask function returns the packed row's
:class:`PackedSequences` instead of building a mask, and transformers hands that object to every layer as the
layer's ``attention_mask`` (activation checkpointing recomputes a layer with the same object). Other
implementations keep transformers' own path: ``flash_attention_2``/``_3`` derive the sequences from the
position ids and run flash attention's variable-length kernel (no mask either), ``flex_attention`` builds a
block mask, and ``eager`` builds the dense mask (quadratic; choose ``sdpa`` for packed training). Ulysses
sequence parallelism (:mod:`rlcore.modelkit.sequence_parallel`) passes a :class:`PackedSequences` of the
whole sequence itself and calls :func:`attend` after its all-to-all.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, cast

import torch
from torch import nn

#: the name of the packed-aware ``sdpa`` in transformers' ``AttentionInterface`` and ``AttentionMaskInterface``
ATTENTION_NAME = "rlcore_packed_sdpa"
#: the attention implementation that :func:`packed_forward` switches to :data:`ATTENTION_NAME`
WRAPPED_IMPLEMENTATION = "sdpa"
#: the kernels :func:`kernel` chooses from
KERNELS = ("varlen", "sdpa")
#: a sequence joins a bucket when it is at least this share of the bucket's longest sequence
BUCKET_RATIO = 0.75

_ACTIVE: ContextVar[PackedSequences | None] = ContextVar("rlcore_packed_sequences", default=None)


@dataclass(frozen=True)
class PackedSequences:
    """The sequences of a packed row ``(1, T)``, laid out for both kernels; built once per micro-batch by
    :func:`packed_sequences` and shared by every layer.

    Attributes:
        lengths: the tokens of each sequence, in row order (0 for an empty one).
        cu_seqlens: ``(n + 1,)`` int32 where each sequence starts, and ``T`` (the ``varlen`` kernel's layout).
        gather: per bucket, ``(rows · width,)`` the row positions that fill its right-padded rows.
        widths: per bucket, its width (the length of its longest sequence).
        scatter: ``(T,)`` where each row position's output is among the buckets' outputs laid end to end.
    """

    lengths: tuple[int, ...]
    cu_seqlens: torch.Tensor
    gather: tuple[torch.Tensor, ...]
    widths: tuple[int, ...]
    scatter: torch.Tensor

    @property
    def total(self) -> int:
        """The row's length ``T``."""
        return sum(self.lengths)

    @property
    def max_length(self) -> int:
        """The longest sequence's length."""
        return max(self.lengths, default=0)


def _buckets(lengths: Sequence[int]) -> list[list[int]]:
    """The non-empty sequences' indices, longest first, in buckets whose members are at least
    :data:`BUCKET_RATIO` of the bucket's first (longest) member."""
    buckets: list[list[int]] = []
    for index in sorted((i for i, n in enumerate(lengths) if n > 0), key=lambda i: -lengths[i]):
        if buckets and lengths[index] >= BUCKET_RATIO * lengths[buckets[-1][0]]:
            buckets[-1].append(index)
        else:
            buckets.append([index])
    return buckets


def packed_sequences(lengths: Sequence[int], device: torch.device) -> PackedSequences:
    """The :class:`PackedSequences` of a row holding sequences of ``lengths`` tokens one after another, its
    index tensors on ``device``."""
    lengths = tuple(int(n) for n in lengths)
    starts = [0, *accumulate(lengths)]
    scatter = torch.empty(starts[-1], dtype=torch.long)
    gather: list[torch.Tensor] = []
    widths: list[int] = []
    offset = 0
    for bucket in _buckets(lengths):
        width = lengths[bucket[0]]
        first = torch.tensor([starts[i] for i in bucket])
        count = torch.tensor([lengths[i] for i in bucket])
        columns = torch.arange(width)
        positions = first[:, None] + torch.minimum(columns[None, :], count[:, None] - 1)
        real = columns[None, :] < count[:, None]
        slots = offset + torch.arange(len(bucket) * width).view(len(bucket), width)
        scatter[positions[real]] = slots[real]
        gather.append(positions.flatten().to(device))
        widths.append(width)
        offset += len(bucket) * width
    return PackedSequences(
        lengths=lengths,
        cu_seqlens=torch.tensor(starts, dtype=torch.int32, device=device),
        gather=tuple(gather),
        widths=tuple(widths),
        scatter=scatter.to(device),
    )


# ------------------------------------------------------------------ kernels
@functools.lru_cache(maxsize=8)
def _varlen_runs_on(device: torch.device) -> bool:
    """Whether torch's variable-length flash attention exists and runs on CUDA ``device``."""
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.get_device_capability(device) >= (8, 0)


def kernel(query: torch.Tensor, dropout: float = 0.0) -> str:
    """The kernel :func:`attend` runs for ``query`` ``[1, H, T, D]`` (one of :data:`KERNELS`; see the module
    docstring)."""
    head_dim = query.shape[-1]
    if (
        query.is_cuda
        and query.dtype in (torch.float16, torch.bfloat16)
        and dropout == 0.0
        and head_dim % 8 == 0
        and head_dim <= 256
        and _varlen_runs_on(query.device)
    ):
        return "varlen"
    return "sdpa"


def _varlen(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    sequences: PackedSequences,
    scaling: float | None,
    sliding_window: int | None,
) -> torch.Tensor:
    """``[1, T, H, D]`` from torch's variable-length flash attention over the packed row."""
    from torch.nn.attention.varlen import varlen_attn

    q, k, v = (t[0].transpose(0, 1).contiguous() for t in (query, key, value))
    longest = sequences.max_length
    out = varlen_attn(
        q,
        k,
        v,
        sequences.cu_seqlens,
        sequences.cu_seqlens,
        longest,
        longest,
        scale=scaling,
        window_size=(-1 if sliding_window is None else sliding_window - 1, 0),
        enable_gqa=k.shape[1] != q.shape[1],
    )
    return cast(torch.Tensor, out).unsqueeze(0)  # a tuple only with return_aux


def _band(width: int, sliding_window: int, device: torch.device) -> torch.Tensor:
    """``[width, width]`` True where a query may see a key: causal, within the last ``sliding_window`` keys."""
    query = torch.arange(width, device=device)[:, None]
    keys = torch.arange(width, device=device)[None, :]
    return (keys <= query) & (keys > query - sliding_window)


def _bucketed(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    sequences: PackedSequences,
    scaling: float | None,
    dropout: float,
    sliding_window: int | None,
) -> torch.Tensor:
    """``[1, T, H, D]`` from one causal ``scaled_dot_product_attention`` per bucket of right-padded rows."""
    heads, head_dim = query.shape[1], query.shape[-1]
    outputs = []
    for gather, width in zip(sequences.gather, sequences.widths, strict=True):
        rows = gather.numel() // width
        q, k, v = (t[0][:, gather].unflatten(1, (rows, width)).transpose(0, 1) for t in (query, key, value))
        mask = None if sliding_window is None else _band(width, sliding_window, query.device)
        out = nn.functional.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=dropout,
            is_causal=mask is None,
            scale=scaling,
            enable_gqa=k.shape[1] != heads,
        )
        outputs.append(out.transpose(1, 2).reshape(rows * width, heads, head_dim))
    laid = outputs[0] if len(outputs) == 1 else torch.cat(outputs)
    return laid[sequences.scatter].unsqueeze(0)


def attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    sequences: PackedSequences,
    *,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """Causal attention within each sequence of a packed row: ``query`` ``[1, H, T, D]``, ``key``/``value``
    ``[1, KV, T, D]`` (``KV`` divides ``H``) → ``[1, T, H, D]``, with the kernel :func:`kernel` picks."""
    if kernel(query, dropout) == "varlen":
        return _varlen(query, key, value, sequences, scaling, sliding_window)
    return _bucketed(query, key, value, sequences, scaling, dropout, sliding_window)


# ------------------------------------------------------------------ transformers
def packed_sdpa_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The transformers attention function of :data:`ATTENTION_NAME`: :func:`attend` when ``attention_mask``
    is a :class:`PackedSequences`, transformers' ``sdpa`` otherwise."""
    if isinstance(attention_mask, PackedSequences):
        out = attend(query, key, value, attention_mask, scaling=scaling, dropout=dropout, sliding_window=sliding_window)
        return out, None
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(
        module,
        query,
        key,
        value,
        attention_mask,
        dropout=dropout,
        scaling=scaling,
        sliding_window=sliding_window,
        **kwargs,
    )


def packed_sdpa_mask(*args: Any, **kwargs: Any) -> Any:
    """The transformers mask function of :data:`ATTENTION_NAME`: inside :func:`packed_forward`, the packed
    row's :class:`PackedSequences` for a mask over that row without a padding mask, a cache or extra mask
    functions; transformers' ``sdpa_mask`` otherwise (``create_causal_mask`` passes keywords)."""
    from transformers.masking_utils import sdpa_mask

    sequences = _ACTIVE.get()
    if (
        sequences is not None
        and not args
        and kwargs.get("attention_mask") is None
        and not kwargs.get("use_vmap", False)
        and kwargs.get("batch_size") == 1
        and kwargs.get("q_length") == kwargs.get("kv_length") == sequences.total
        and not kwargs.get("q_offset")
        and not kwargs.get("kv_offset")
    ):
        return sequences
    return sdpa_mask(*args, **kwargs)


@functools.cache
def register() -> None:
    """Register :data:`ATTENTION_NAME` with transformers (once per process)."""
    from transformers import AttentionInterface, AttentionMaskInterface

    AttentionInterface.register(ATTENTION_NAME, packed_sdpa_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, packed_sdpa_mask)


def use_packed_attention(model: nn.Module) -> str | None:
    """Switch ``model`` (possibly wrapped: FSDP, DeepSpeed, peft, a value model's backbone) to
    :data:`ATTENTION_NAME` when its outermost Hugging Face model attends with ``sdpa``; the attention
    implementation it has now (None without a Hugging Face model)."""
    from transformers import PreTrainedModel

    hf = next((module for module in model.modules() if isinstance(module, PreTrainedModel)), None)
    if hf is None:
        return None
    if hf.config._attn_implementation == WRAPPED_IMPLEMENTATION:
        register()
        hf.set_attn_implementation(ATTENTION_NAME)
    return str(hf.config._attn_implementation)


@contextmanager
def packed_forward(model: nn.Module, sequences: PackedSequences) -> Iterator[None]:
    """Inside, ``model`` runs the packed row of ``sequences`` without a mask (see the module docstring); it
    is switched to :data:`ATTENTION_NAME` first when it attends with ``sdpa``."""
    use_packed_attention(model)
    token = _ACTIVE.set(sequences)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
