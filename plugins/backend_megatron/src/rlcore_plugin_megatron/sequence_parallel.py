"""Megatron sequence parallelism (verl's ``megatron.sequence_parallel``) on megatron-core's local layer spec.

With ``sequence_parallel`` and tensor parallelism, the tensor-parallel ranks split the sequence outside the
attention and MLP blocks: the embedding scatters it, the column-parallel linears gather it and the row-parallel
linears reduce-scatter it (megatron-core's local ``ColumnParallelLinear``/``RowParallelLinear`` do this on any
device; gloo has the collectives). Only the norms stand in the way: megatron-core's ``WrappedTorchNorm``
refuses sequence parallelism, because a norm that sees a slice of the sequence computes a partial gradient of
its weight, which Transformer Engine's norms mark with ``sequence_parallel = True`` for megatron-core's gradient
reduction. :class:`SequenceParallelNorm` is ``torch.nn.RMSNorm`` with that mark, :func:`sequence_parallel_spec`
puts it in place of every ``WrappedTorchNorm`` of a layer (or MTP block) spec, and the engine sums the marked
gradients over the tensor-parallel group (:func:`tensor_parallel_partial`), as megatron-core's
``finalize_model_grads`` does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch


class SequenceParallelNorm:
    """megatron-core's norm factory (the ``WrappedTorchNorm`` signature) for sequence parallelism: a
    ``torch.nn.RMSNorm`` whose weight carries ``sequence_parallel`` (its gradient is partial on each
    tensor-parallel rank when the config splits the sequence)."""

    def __new__(  # type: ignore[misc]
        cls,
        config: Any,
        hidden_size: int,
        eps: float = 1e-5,
        persist_layer_norm: bool = False,
        zero_centered_gamma: bool = False,
        normalization: str = "RMSNorm",
    ) -> torch.nn.RMSNorm:
        """The norm over ``hidden_size`` with ``eps`` (RMSNorm: the only normalization the engine builds)."""
        norm = torch.nn.RMSNorm(hidden_size, eps=eps)
        norm.weight.sequence_parallel = bool(config.sequence_parallel)  # type: ignore[attr-defined]
        return norm


def sequence_parallel_spec(spec: Any) -> Any:
    """``spec`` (a ``ModuleSpec``, a submodules dataclass, a list of them or a class) with every
    ``WrappedTorchNorm`` replaced by :class:`SequenceParallelNorm`, recursively."""
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    if spec is WrappedTorchNorm:
        return SequenceParallelNorm
    if isinstance(spec, list):
        return [sequence_parallel_spec(item) for item in spec]
    if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        fields = dataclasses.fields(spec)
        return dataclasses.replace(
            spec, **{field.name: sequence_parallel_spec(getattr(spec, field.name)) for field in fields if field.init}
        )
    return spec


def block_spec(config: Any, layer_spec: Any) -> Any:
    """The ``TransformerBlockSubmodules`` of this pipeline stage for sequence parallelism: ``layer_spec``'s norms
    and the final norm as :class:`SequenceParallelNorm` (megatron-core would give the block a
    ``WrappedTorchNorm`` final norm), with as many layers as megatron-core builds on this stage."""
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules, get_num_layers_to_build

    layer = sequence_parallel_spec(layer_spec)
    return TransformerBlockSubmodules(
        layer_specs=[layer] * get_num_layers_to_build(config), layer_norm=SequenceParallelNorm
    )


def tensor_parallel_partial(name: str, param: torch.Tensor, config: Any) -> bool:
    """Whether the gradient of replicated weight ``name`` is partial on each tensor-parallel rank (to be summed
    over the group): a norm that sees a slice of the sequence (sequence parallelism), and the query/key norms,
    which see only the rank's attention heads (megatron-core's ``_allreduce_non_tensor_model_parallel_grads``)."""
    if config.tensor_model_parallel_size == 1:
        return False
    if config.sequence_parallel and getattr(param, "sequence_parallel", False):
        return True
    return bool(config.qk_layernorm) and ("q_layernorm" in name or "k_layernorm" in name)
