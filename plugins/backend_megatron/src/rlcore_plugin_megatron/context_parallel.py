"""Context parallelism for megatron-core's local layer spec: each rank of a context-parallel (CP) group holds
``1/C`` of every sequence's tokens, and attention sees the whole causal context through an all-gather of the
keys and values.

The split is megatron-core's load-balanced one: a sequence of ``T`` tokens (``T`` a multiple of ``2·C``; the
engine pads) is cut into ``2·C`` equal chunks and CP rank ``r`` holds chunks ``r`` and ``2C − 1 − r``, so every
rank does the same causal attention work. megatron-core's RoPE already selects the positions of those chunks
(``get_pos_emb_on_this_cp_rank``); :func:`cp_positions` gives the same positions for the tokens, and
:class:`~rlcore_plugin_megatron.attention.CausalAttention` gathers keys and values with :func:`gather_sequence`.
Every other layer works per token and needs nothing.

Gradients: every CP rank computes the same loss on the gathered outputs, and its backward reaches the weights
only through its own tokens; the weight gradients of the CP ranks are therefore summed (the engine all-reduces
over data-parallel × CP ranks and divides by the data-parallel size only).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def cp_positions(width: int, cp_size: int, cp_rank: int, device: torch.device | None = None) -> torch.Tensor:
    """The global positions ``[width / cp_size]`` of the tokens CP rank ``cp_rank`` holds: chunks ``cp_rank``
    and ``2·cp_size − 1 − cp_rank`` of ``2·cp_size`` (``width`` must be a multiple of ``2·cp_size``)."""
    if width % (2 * cp_size):
        raise ValueError(f"a context-parallel sequence length must be a multiple of {2 * cp_size}, got {width}")
    chunk = width // (2 * cp_size)
    arange = torch.arange(chunk, device=device)
    return torch.cat([cp_rank * chunk + arange, (2 * cp_size - 1 - cp_rank) * chunk + arange])


def pos_emb_on_this_cp_rank(pos_emb: torch.Tensor, seq_dim: int, cp_group: Any) -> torch.Tensor:
    """The rows of ``pos_emb`` (RoPE frequencies, sequence along ``seq_dim``) of this rank's tokens: what
    megatron-core's ``get_pos_emb_on_this_cp_rank`` returns, without its CUDA-only pinned copy (used on the CPU,
    see :mod:`rlcore_plugin_megatron.cpu_compat`)."""
    index = cp_positions(pos_emb.shape[seq_dim], cp_group.size(), cp_group.rank(), pos_emb.device)
    return pos_emb.index_select(seq_dim, index)


class _GatherSequence(torch.autograd.Function):
    """All-gather along a sequence dimension over a CP group, in global token order."""

    @staticmethod
    def forward(ctx: Any, local: torch.Tensor, dim: int, group: Any, sum_grads: bool) -> torch.Tensor:
        """``[…, width / C, …]`` local tokens to ``[…, width, …]`` (global order)."""
        size, rank = group.size(), group.rank()
        parts = [torch.empty_like(local) for _ in range(size)]
        dist.all_gather(parts, local.contiguous(), group=group)
        width = local.shape[dim] * size
        order = torch.cat([cp_positions(width, size, r, local.device) for r in range(size)])
        full = torch.empty_like(torch.cat(parts, dim))
        full.index_copy_(dim, order, torch.cat(parts, dim))
        ctx.dim, ctx.group, ctx.sum_grads = dim, group, sum_grads
        ctx.own = cp_positions(width, size, rank, local.device)
        return full

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """This rank's slice of the gradient, summed over the group first when every rank's gradient is a
        partial one (gloo has no reduce-scatter: an all-reduce then a slice)."""
        if ctx.sum_grads:
            grad = grad.contiguous()
            dist.all_reduce(grad, group=ctx.group)
        return grad.index_select(ctx.dim, ctx.own), None, None, None


def gather_sequence(local: torch.Tensor, dim: int, group: Any, *, sum_grads: bool) -> torch.Tensor:
    """The full sequence of ``local`` (this CP rank's tokens along ``dim``), differentiable.

    ``sum_grads``: the backward sums the gradient over the group before taking this rank's slice (a
    reduce-scatter) — right when each rank's loss reaches the gathered tensor through its own tokens only
    (keys and values); without it each rank keeps its slice — right when every rank computes the same loss
    from the gathered tensor (the model's outputs).
    """
    return _GatherSequence.apply(local, dim, group, sum_grads)
