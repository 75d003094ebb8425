"""Ulysses sequence parallelism (``ulysses_sequence_parallel_size``): one implementation for every engine.

The ranks of the worker group form consecutive groups of ``size`` ranks (``[0, 1], [2, 3], …`` for size 2).
The ranks of a group receive the same micro-batches (they share one data-parallel rank, see
:func:`parallel_layout`) and each runs the model on one contiguous slice of the sequence: embeddings, MLPs,
norms and the projections to the vocabulary see ``T / size`` tokens. Around attention an all-to-all swaps
the split: every rank gets the whole sequence for ``heads / size`` of the heads, runs scaled-dot-product
attention with the full mask, and a second all-to-all returns its slice of the sequence with all heads
(DeepSpeed-Ulysses, arXiv:2309.14509). The per-token results (log-probs, entropies, values) are gathered
over the group, so the loss is computed on the whole sequence on every rank of the group.

The attention runs through a function registered with transformers' ``AttentionInterface`` as
:data:`ATTENTION_NAME`; :func:`install` switches a model to it. What the attention needs about the whole
sequence is built here and passed to the model as a ready mask mapping: for padded batches the causal mask
with key padding ``[B, 1, T, T]``; for packed sequences (``use_remove_padding``) no mask but the sequences'
lengths (:class:`rlcore.modelkit.packed_attention.PackedSequences`), and after the all-to-all each sequence
attends causally within itself (:func:`rlcore.modelkit.packed_attention.attend`), as without Ulysses.
Sequences whose length does not divide by ``size`` are padded at the end to the next multiple; the padding
attends only to itself (a packed row's padding is a sequence of its own) and its outputs are dropped. Key/value heads are repeated when their number does not divide by
``size`` (grouped-query attention with one KV head and size 2); the query heads must divide.

Gradients: every rank of a group computes the same loss from the gathered outputs and back-propagates
only through its own slice, so the sum of the group's gradients is the gradient of that loss. The data-
parallel reduction of FSDP and DeepSpeed averages over all ``world`` ranks while the worker scales losses
for ``world / size`` data-parallel ranks, so the gather's backward multiplies by ``size``.

gloo implements ``all_to_all`` for float32, bfloat16 and float16 (checked with torch 2.13), so no
all-gather fallback is needed on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from omegaconf import DictConfig
from torch import nn

from rlcore.api.batch import Batch
from rlcore.api.training import ParallelLayout
from rlcore.config.batch_sizes import ulysses_size
from rlcore.errors import RLCoreError
from rlcore.modelkit.packed_attention import PackedSequences, attend, packed_sequences
from rlcore.modelkit.packing import PackedBatch

#: the name of the Ulysses attention in transformers' ``AttentionInterface``
ATTENTION_NAME = "rlcore_ulysses"
#: the attribute :func:`install` sets on every module of a model: its :class:`SequenceParallel`
MODULE_ATTRIBUTE = "_rlcore_sequence_parallel"


@dataclass(frozen=True)
class SequenceParallel:
    """This rank's sequence-parallel group.

    Attributes:
        group: the process group of the ``size`` consecutive ranks that share the micro-batches.
        size: the number of ranks that split each sequence.
        rank: this rank's position in the group: it holds slice ``rank`` of every sequence.
    """

    group: Any
    size: int
    rank: int


def parallel_layout(rank: int, world_size: int, size: int) -> ParallelLayout:
    """The data-parallel position of ``rank`` when groups of ``size`` ranks split sequences: the group's
    index over ``world_size / size`` data-parallel ranks; the group's first rank returns the outputs."""
    return ParallelLayout(rank // size, world_size // size, is_output_rank=rank % size == 0)


def new_sequence_parallel(size: int, rank: int, world_size: int, key: str) -> SequenceParallel | None:
    """The group of ``rank`` for ``size`` (None for 1). Collective: every rank creates every group.
    ``size`` must divide ``world_size``; the error names ``key``."""
    if size == 1:
        return None
    if world_size % size:
        raise RLCoreError(f"{key}={size} must divide the number of ranks of the worker group ({world_size})")
    groups = [dist.new_group(list(range(first, first + size))) for first in range(0, world_size, size)]
    return SequenceParallel(groups[rank // size], size, rank % size)


def from_config(
    config: DictConfig, section: str, rank: int, world_size: int
) -> tuple[ParallelLayout, SequenceParallel | None]:
    """The layout and the group (None without sequence parallelism) of the engine at config ``section``
    (its ``ulysses_sequence_parallel_size``) for ``rank`` of ``world_size``. Collective."""
    size = ulysses_size(config, section)
    key = f"{section}.ulysses_sequence_parallel_size"
    return parallel_layout(rank, world_size, size), new_sequence_parallel(size, rank, world_size, key)


# ------------------------------------------------------------------ communication


def data_parallel_sum(value: float, world_size: int, device: torch.device, sp: SequenceParallel | None) -> float:
    """The sum of ``value`` over the data-parallel ranks, for engines whose every rank holds a data-parallel
    share except that the ranks of one Ulysses group hold the same one: the sum over all ``world_size``
    ranks divided by the group size. Collective over the default group."""
    if world_size == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return float(tensor.item()) / (sp.size if sp is not None else 1)


def _all_to_all(x: torch.Tensor, sp: SequenceParallel, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    """Send chunk ``i`` of ``x`` along ``scatter_dim`` to group rank ``i``; concatenate what arrives along
    ``gather_dim`` in group-rank order."""
    inputs = [chunk.contiguous() for chunk in x.chunk(sp.size, dim=scatter_dim)]
    outputs = [torch.empty_like(inputs[0]) for _ in range(sp.size)]
    dist.all_to_all(outputs, inputs, group=sp.group)
    return torch.cat(outputs, dim=gather_dim)


class _AllToAll(torch.autograd.Function):
    """:func:`_all_to_all` with its inverse as the backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, sp: SequenceParallel, scatter_dim: int, gather_dim: int) -> torch.Tensor:
        ctx.sp, ctx.scatter_dim, ctx.gather_dim = sp, scatter_dim, gather_dim
        return _all_to_all(x, sp, scatter_dim, gather_dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        return _all_to_all(grad, ctx.sp, ctx.gather_dim, ctx.scatter_dim), None, None, None


def all_to_all(x: torch.Tensor, sp: SequenceParallel, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    """Differentiable all-to-all over the group: split ``scatter_dim`` across the ranks, join ``gather_dim``
    (heads → sequence before attention, sequence → heads after it)."""
    return _AllToAll.apply(x, sp, scatter_dim, gather_dim)


class _GatherSequence(torch.autograd.Function):
    """All-gather of the sequence slices; the backward keeps this rank's slice, times the group size."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, sp: SequenceParallel, dim: int) -> torch.Tensor:
        ctx.sp, ctx.dim = sp, dim
        parts = [torch.empty_like(x) for _ in range(sp.size)]
        dist.all_gather(parts, x.contiguous(), group=sp.group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        sp = ctx.sp
        return grad.chunk(sp.size, dim=ctx.dim)[sp.rank] * sp.size, None, None


def gather_sequence(x: torch.Tensor, sp: SequenceParallel, dim: int) -> torch.Tensor:
    """The whole sequence from every rank's slice ``x`` along ``dim`` (differentiable; see the module
    docstring for the factor ``size`` in the backward)."""
    return _GatherSequence.apply(x, sp, dim)


# ------------------------------------------------------------------ attention
def ulysses_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | PackedSequences | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    **_: Any,
) -> tuple[torch.Tensor, None]:
    """transformers attention function: ``query`` ``[B, H, T/size, D]``, ``key``/``value`` ``[B, KV, T/size, D]``
    of this rank's slice (after the rotary embedding) → ``[B, T/size, H, D]``. ``attention_mask`` is what
    :func:`shard_padded` / :func:`shard_packed` built for the whole sequence: the additive mask
    ``[B, 1, T, T]`` of a padded batch (one tensor for every layer, so autograd saves it once; cast per
    layer only when the compute dtype differs from the one it was built in, as under FSDP's mixed
    precision), or the :class:`~rlcore.modelkit.packed_attention.PackedSequences` of a packed row."""
    sp: SequenceParallel | None = getattr(module, MODULE_ATTRIBUTE, None)
    if sp is None:
        raise RLCoreError(f"{ATTENTION_NAME} attention ran on a model without a sequence-parallel group")
    if sliding_window is not None:
        raise RLCoreError("Ulysses sequence parallelism does not support sliding-window attention layers")
    if attention_mask is None or (isinstance(attention_mask, torch.Tensor) and attention_mask.dim() != 4):
        raise RLCoreError(f"{ATTENTION_NAME} attention needs the whole-sequence mask of shard_padded/shard_packed")
    heads, kv_heads = query.shape[1], key.shape[1]
    if kv_heads % sp.size:
        key = key.repeat_interleave(heads // kv_heads, dim=1)
        value = value.repeat_interleave(heads // kv_heads, dim=1)
    query, key, value = (all_to_all(t, sp, scatter_dim=1, gather_dim=2) for t in (query, key, value))
    if isinstance(attention_mask, PackedSequences):
        out = attend(query, key, value, attention_mask, scaling=scaling, dropout=dropout).transpose(1, 2)
    else:
        groups = query.shape[1] // key.shape[1]
        if groups > 1:
            key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        if attention_mask.dtype != query.dtype:
            attention_mask = attention_mask.to(query.dtype)
        out = nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling
        )
    out = all_to_all(out, sp, scatter_dim=2, gather_dim=1)
    return out.transpose(1, 2).contiguous(), None


def _no_mask(*_: Any, **__: Any) -> None:
    """The mask builder registered with the attention: the engine always passes its own masks."""
    return None


def install(model: nn.Module, sp: SequenceParallel, key: str) -> None:
    """Run ``model``'s attention through :func:`ulysses_attention` over ``sp``; the query heads must divide
    by the group size (the error names ``key``). Call before wrapping the model (FSDP, DeepSpeed)."""
    from transformers import AttentionInterface, AttentionMaskInterface

    hf_config: Any = model.config
    text_config = hf_config.get_text_config()
    heads = int(text_config.num_attention_heads)
    if heads % sp.size:
        raise RLCoreError(f"{key}={sp.size} must divide the model's number of attention heads ({heads})")
    layer_types = set(getattr(text_config, "layer_types", None) or ["full_attention"])
    if layer_types != {"full_attention"}:
        raise RLCoreError(
            f"{key}={sp.size}: the model has {sorted(layer_types)} layers; only full attention is supported"
        )
    AttentionInterface.register(ATTENTION_NAME, ulysses_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, _no_mask)
    target: Any = model.backbone if hasattr(model, "backbone") else model
    target.set_attn_implementation(ATTENTION_NAME)
    for module in model.modules():
        setattr(module, MODULE_ATTRIBUTE, sp)


# ------------------------------------------------------------------ inputs
@dataclass(frozen=True)
class ShardedInput:
    """One micro-batch as a rank of the group feeds it to the model.

    Attributes:
        input_ids: ``[B, T'/size]`` this rank's slice of the (padded) tokens.
        position_ids: ``[B, T'/size]`` their positions.
        mask: ``[B, 1, T', T']`` the whole-sequence additive attention mask of a padded batch (0: may attend,
            the dtype's lowest value: may not), or the sequences of a packed row ``(1, T')``.
        labels: ``[B, T'/size]`` the next token of every position of the slice (0 after the last one).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    mask: torch.Tensor | PackedSequences
    labels: torch.Tensor

    def model_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of a transformers model's forward for this slice."""
        return {
            "input_ids": self.input_ids,
            "position_ids": self.position_ids,
            "attention_mask": {"full_attention": self.mask},
        }


def _pad_to(x: torch.Tensor, length: int, value: int = 0) -> torch.Tensor:
    """``x`` ``[B, T]`` padded with ``value`` at the end to ``[B, length]``."""
    return nn.functional.pad(x, (0, length - x.shape[1]), value=value)


def _slice(x: torch.Tensor, sp: SequenceParallel) -> torch.Tensor:
    """This rank's contiguous slice along the sequence (dimension 1)."""
    return x.chunk(sp.size, dim=1)[sp.rank]


def _shard(
    ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | PackedSequences, sp: SequenceParallel
) -> ShardedInput:
    """Slice padded ``ids`` and ``positions`` ``[B, T']``; the labels are the next tokens."""
    labels = nn.functional.pad(ids[:, 1:], (0, 1))
    return ShardedInput(_slice(ids, sp), _slice(positions, sp), mask, _slice(labels, sp))


def padded_length(length: int, sp: SequenceParallel) -> int:
    """``length`` rounded up to a multiple of the group size."""
    return -(-length // sp.size) * sp.size


def shard_padded(batch: Batch, sp: SequenceParallel, dtype: torch.dtype = torch.float32) -> ShardedInput:
    """This rank's slice of a padded micro-batch (``input_ids``, ``attention_mask``, ``position_ids``
    ``[B, T]``), with the causal mask over attended keys (every position also sees itself, so that padding
    rows are not empty)."""
    length = padded_length(batch["input_ids"].shape[1], sp)
    ids = _pad_to(batch["input_ids"], length)
    keys = _pad_to(batch["attention_mask"], length).bool()
    positions = _pad_to(batch["position_ids"], length)
    causal = torch.ones(length, length, dtype=torch.bool, device=ids.device).tril()
    eye = torch.eye(length, dtype=torch.bool, device=ids.device)
    allowed = ((causal & keys[:, None, :]) | eye)[:, None]
    # additive: SDPA would otherwise convert a boolean mask in every layer and autograd keep each copy
    mask = torch.zeros(allowed.shape, dtype=dtype, device=ids.device).masked_fill_(~allowed, torch.finfo(dtype).min)
    return _shard(ids, positions, mask, sp)


def shard_packed(packed: PackedBatch, sp: SequenceParallel) -> ShardedInput:
    """This rank's slice of a packed row ``(1, nnz)`` and the sequences of the whole row, whose end padding
    forms a sequence of its own: each sequence attends causally within itself, without a mask."""
    nnz = packed.input_ids.shape[1]
    length = padded_length(nnz, sp)
    extra = torch.arange(length - nnz, device=packed.position_ids.device, dtype=packed.position_ids.dtype)
    ids = _pad_to(packed.input_ids, length)
    positions = torch.cat([packed.position_ids, extra[None]], dim=1)
    sequences = packed_sequences([*packed.lengths, length - nnz], ids.device)
    return _shard(ids, positions, sequences, sp)


def attended_slice(mask: torch.Tensor, sp: SequenceParallel) -> torch.Tensor:
    """Which positions of this rank's slice hold attended tokens: ``mask`` ``[B, T]`` (the attention mask, or
    ones ``(1, nnz)`` for a packed row) padded as :func:`shard_padded`/:func:`shard_packed` pad, then sliced;
    bool ``[B, T'/size]``."""
    return _slice(_pad_to(mask, padded_length(mask.shape[1], sp)), sp).bool()


def check_config(config: DictConfig, role: str, section: str) -> None:
    """Check ``{section}.ulysses_sequence_parallel_size`` before any model exists: a positive integer, and
    for the reference model the actor's size (both run in the actor's worker group, which dispatches by
    one layout)."""
    size = ulysses_size(config, section)
    actor = "actor_rollout_ref.actor"
    if role == "ref" and size != ulysses_size(config, actor):
        raise RLCoreError(
            f"{section}.ulysses_sequence_parallel_size={size} must equal {actor}.ulysses_sequence_parallel_size "
            f"({ulysses_size(config, actor)}): the reference model runs in the actor's worker group"
        )
