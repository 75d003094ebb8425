"""LoRA adapters on megatron-core's parallel linear layers (``actor_rollout_ref.model.lora.rank > 0``).

Every adapted layer (:meth:`LoraSettings.adapts`: ``linear_qkv``, ``linear_proj``, ``linear_fc1``, ``linear_fc2``,
each expert's and the shared expert's projections included) gets a child ``lora`` holding ``A [r, in]`` and
``B [out, r]``; a forward hook adds ``alpha/r · B·A·x`` to the layer's output. Tensor parallelism splits the
adapter like its layer: a column-parallel layer's ``A`` is replicated and ``B`` split by output rows (``B``'s
gradient is local; ``A·x``'s is summed over the tensor-parallel group); a row-parallel layer's ``A`` is split by
input columns and ``B`` replicated (``A·x`` is summed over the group in the forward). ``A`` is drawn whole from a
generator seeded by the run's seed and the layer's global name, then sliced, so every layout starts from the
same adapters; ``B`` starts at zero, so the first policy is the base model's.

The base weights are frozen; :func:`merged_parameters` gives each rank's shards of ``W + alpha/r · B·A`` (the
same shape and layout as ``W``), which the engine gathers and converts to Hugging Face names like any weight.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Iterator
from typing import Any, cast

import torch
from torch import nn

from rlcore_plugin_megatron.lora_settings import TARGET_LAYERS, LoraSettings
from rlcore_plugin_megatron.moe_convert import expert_of

#: an adapter matrix's parameter name: ``<layer>.lora.A`` or ``<layer>.lora.B``
_ADAPTER = re.compile(r"^(?P<layer>.+)\.lora\.(?P<matrix>[AB])$")
_LAYER_NUMBER = re.compile(r"^decoder\.layers\.(\d+)\.")


def is_adapter(name: str) -> bool:
    """Whether the parameter ``name`` is an adapter matrix."""
    return _ADAPTER.match(name) is not None


def adapter_partition_dim(name: str) -> int | None:
    """The dimension along which tensor parallelism splits the adapter matrix ``name`` (None: replicated; an
    expert's adapters are never split: ``expert_tensor_parallel_size`` is 1)."""
    match = _ADAPTER.match(name)
    if match is None:
        raise ValueError(f"{name!r} is not an adapter matrix")
    if expert_of(name) is not None:
        return None
    column = TARGET_LAYERS[match.group("layer").rpartition(".")[2]] == "column"
    if match.group("matrix") == "A":
        return None if column else 1
    return 0 if column else None


class LoraAdapter(nn.Module):
    """The adapter of one parallel linear layer (this rank's shards of ``A`` and ``B``)."""

    def __init__(self, layer: nn.Module, parallel: str, settings: LoraSettings, generator: torch.Generator) -> None:
        """Shards of ``A`` (initialised by ``settings.a_init`` from ``generator``) and a zero ``B`` for ``layer``
        (a megatron-core ``ColumnParallelLinear`` when ``parallel`` is ``column``, else ``RowParallelLinear``)."""
        from megatron.core.utils import get_pg_rank, get_pg_size

        super().__init__()
        self.parallel, self.scaling = parallel, settings.scaling
        self.dropout, self.dropout_position = settings.dropout, settings.dropout_position
        self.group = layer.tp_group
        self.tp_size, tp_rank = get_pg_size(self.group), get_pg_rank(self.group)
        weight = cast("torch.Tensor", layer.weight)  # a parallel linear layer's weight parameter
        out_local, in_local = weight.shape
        in_full = in_local * (self.tp_size if parallel == "row" else 1)
        full_a = torch.empty(settings.rank, in_full, dtype=torch.float32)
        if settings.a_init == "xavier":
            nn.init.xavier_uniform_(full_a, generator=generator)
        else:
            nn.init.kaiming_uniform_(full_a, a=math.sqrt(5), generator=generator)
        a = full_a.chunk(self.tp_size, dim=1)[tp_rank] if parallel == "row" else full_a
        self.A = nn.Parameter(a.to(device=weight.device, dtype=weight.dtype).contiguous())
        self.B = nn.Parameter(torch.zeros(out_local, settings.rank, device=weight.device, dtype=weight.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``alpha/r · B·A·x`` for the layer's input ``x`` (this rank's part of the layer's output)."""
        from megatron.core.tensor_parallel.mappings import (
            copy_to_tensor_model_parallel_region,
            reduce_from_tensor_model_parallel_region,
        )

        if self.dropout_position == "pre":
            x = nn.functional.dropout(x, self.dropout, self.training)
        inner = nn.functional.linear(x, self.A)
        if self.tp_size > 1:
            region = (
                copy_to_tensor_model_parallel_region
                if self.parallel == "column"
                else reduce_from_tensor_model_parallel_region
            )
            inner = region(inner, group=self.group)
        out = nn.functional.linear(inner, self.B) * self.scaling
        if self.dropout_position == "post":
            out = nn.functional.dropout(out, self.dropout, self.training)
        return out

    def add_to_output(
        self, layer: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: tuple[torch.Tensor, Any]
    ) -> tuple[torch.Tensor, Any]:
        """The layer's forward hook: its ``(output, bias)`` with the adapter's output added."""
        x = args[0] if args else kwargs["input_"]
        result, bias = output
        return result + self(x), bias

    def delta(self) -> torch.Tensor:
        """``alpha/r · B·A``: this rank's shard of the change the adapter makes to the layer's weight."""
        return (self.B.detach() @ self.A.detach()) * self.scaling


def global_module_name(name: str, layers: range, ep_rank: int, ep_size: int, num_experts: int) -> str:
    """The model-wide name of a chunk's module ``name``: global layer and expert numbers."""
    from rlcore_plugin_megatron.moe_convert import ep_global_name

    match = _LAYER_NUMBER.match(name)
    if match is not None:
        name = f"decoder.layers.{layers[int(match.group(1))]}.{name[match.end() :]}"
    if num_experts and expert_of(f"{name}.weight") is not None:
        name = ep_global_name(f"{name}.weight", ep_rank, ep_size, num_experts).removesuffix(".weight")
    return name


def apply_lora(
    module: nn.Module, settings: LoraSettings, *, seed: int, layers: range, ep: tuple[int, int], num_experts: int
) -> list[str]:
    """Freeze ``module`` (one pipeline chunk holding global layers ``layers``; expert-parallel rank and size
    ``ep``) and give every layer :meth:`LoraSettings.adapts` an adapter; the global names of the adapted layers."""
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear

    module.requires_grad_(False)
    adapted = []
    for name, layer in list(module.named_modules()):
        if not isinstance(layer, (ColumnParallelLinear, RowParallelLinear)):
            continue
        global_name = global_module_name(name, layers, ep[0], ep[1], num_experts)
        if not settings.adapts(global_name):
            continue
        generator = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(global_name.encode()))
        parallel = "column" if isinstance(layer, ColumnParallelLinear) else "row"
        layer.lora = LoraAdapter(layer, parallel, settings, generator)
        layer.register_forward_hook(layer.lora.add_to_output, with_kwargs=True)
        adapted.append(global_name)
    return adapted


def merged_parameters(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``module``'s weights without the adapter matrices, an adapted layer's weight as ``W + alpha/r · B·A``
    (this rank's shard, new tensors: the model is unchanged)."""
    adapters = {
        name: layer.lora
        for name, layer in module.named_modules()
        if isinstance(getattr(layer, "lora", None), LoraAdapter)
    }
    for name, param in module.named_parameters():
        if is_adapter(name):
            continue
        owner, _, leaf = name.rpartition(".")
        tensor = param.detach()
        if leaf == "weight" and owner in adapters:
            tensor = tensor + adapters[owner].delta().to(tensor.dtype)
        yield name, tensor
