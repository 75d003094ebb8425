"""Core attention for megatron-core's local layer spec: one call of torch's ``scaled_dot_product_attention``.

megatron-core's local ``DotProductAttention`` (what its layer spec uses without Transformer Engine) writes out
the ``[b, heads, s, s]`` scores, masks and softmaxes them in separate kernels, and keeps them for the backward.
:class:`CausalAttention` takes its place in the spec and computes the same causal attention with torch's fused
kernel (flash attention on CUDA and on the CPU), which keeps no score matrix. The engine shifts every row to
start at position 0 (``engine.prepare``), so a causal mask is the whole mask and ``attention_mask`` is not read.

With context parallelism (``context_parallel_size > 1``) keys and values are all-gathered over the CP group first
(:func:`~rlcore_plugin_megatron.context_parallel.gather_sequence`) and each local query attends to every global
position up to its own (megatron-core's local attention refuses ``cp > 1``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from rlcore_plugin_megatron.context_parallel import cp_positions, gather_sequence


class CausalAttention(nn.Module):
    """Causal core attention, called as megatron-core's ``DotProductAttention`` is: queries ``[sq, b, heads, hn]``
    and keys/values ``[sk, b, groups, hn]`` of this tensor-parallel rank give the context ``[sq, b, heads·hn]``."""

    def __init__(
        self,
        config: Any,
        layer_number: int,
        attn_mask_type: Any,
        attention_type: str,
        attention_dropout: float | None = None,
        softmax_scale: float | None = None,
        cp_comm_type: str | None = None,
        pg_collection: Any = None,
    ) -> None:
        """Head counts of this tensor-parallel rank and the softmax scale, as ``DotProductAttention`` takes
        them; the context-parallel group when ``config.context_parallel_size > 1``. Dropout must be 0 (the
        engine builds models without it)."""
        super().__init__()
        dropout = config.attention_dropout if attention_dropout is None else attention_dropout
        if dropout:
            raise ValueError(f"rlcore's Megatron attention has no dropout, got attention_dropout={dropout}")
        tp = config.tensor_model_parallel_size
        self.heads = config.num_attention_heads // tp
        self.groups = config.num_query_groups // tp
        self.softmax_scale = 1.0 / math.sqrt(config.kv_channels) if softmax_scale is None else softmax_scale
        if config.apply_query_key_layer_scaling:
            self.softmax_scale /= max(1, layer_number)
        self.cp_group: Any = None
        if config.context_parallel_size > 1:
            from megatron.core import parallel_state as ps

            self.cp_group = ps.get_context_parallel_group()

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_mask_type: Any = None,
        attention_bias: Any = None,
        packed_seq_params: Any = None,
    ) -> torch.Tensor:
        """The causal context ``[sq, b, heads·hn]`` of ``query`` over ``key`` and ``value`` (gathered over the
        context-parallel group when there is one)."""
        if attention_bias is not None or packed_seq_params is not None:
            raise ValueError("rlcore's Megatron attention takes neither an attention bias nor packed sequences")
        allowed: torch.Tensor | None = None
        if self.cp_group is not None:
            size, rank = self.cp_group.size(), self.cp_group.rank()
            key = gather_sequence(key, 0, self.cp_group, sum_grads=True)
            value = gather_sequence(value, 0, self.cp_group, sum_grads=True)
            q_pos = cp_positions(query.shape[0] * size, size, rank, query.device)
            allowed = torch.arange(key.shape[0], device=query.device)[None, :] <= q_pos[:, None]
        # [s, b, h, d] -> [b, h, s, d]
        context = torch.nn.functional.scaled_dot_product_attention(
            query.permute(1, 2, 0, 3),
            key.permute(1, 2, 0, 3),
            value.permute(1, 2, 0, 3),
            attn_mask=allowed,
            is_causal=allowed is None,
            scale=self.softmax_scale,
            enable_gqa=self.heads > self.groups,
        )
        return context.permute(2, 0, 1, 3).reshape(query.shape[0], query.shape[1], -1)
