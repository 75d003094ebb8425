"""Hugging Face <-> megatron-core names of a Qwen3-MoE layer's router and experts, and their split over
expert-parallel ranks.

Hugging Face (transformers' in-memory names, what rlcore's engines exchange): ``mlp.gate.weight [E, H]``,
``mlp.experts.gate_up_proj [E, 2I, H]`` (each expert's gate rows, then its up rows) and
``mlp.experts.down_proj [E, H, I]``. megatron-core: ``mlp.router.weight`` and, per expert ``e``, ``linear_fc1``
``[2I, H]`` (gate rows first, as megatron-core's gated linear unit splits it) and ``linear_fc2 [H, I]``, named
``mlp.experts.local_experts.<e>.linear_fc{1,2}.weight`` on the local spec (``SequentialMLP``) or
``mlp.experts.linear_fc{1,2}.weight<e>`` in the grouped form (``TEGroupedMLP``, ``names="te"``). Qwen2-MoE's shared expert (``mlp.shared_expert.
{gate,up,down}_proj.weight``, gated by ``mlp.shared_expert_gate.weight [1, H]``) is megatron-core's
``mlp.shared_experts.linear_fc1`` (gate rows, then up rows), ``linear_fc2`` and ``gate_weight`` (megatron-core also
scales the shared expert's output by the sigmoid of that gate). Every tensor is a slice, a stack or a concatenation
of the other side's, so conversions are bit-exact.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

import torch

from rlcore.api import RLCoreError

if TYPE_CHECKING:
    from rlcore_plugin_megatron.convert import ModelSpec

#: megatron-core's prefix of a layer's shared expert
SHARED = "mlp.shared_experts."
_EXPERT = re.compile(
    r"^(?P<head>.*mlp\.experts\.)(?:local_experts\.(?P<local>\d+)\.(?P<tail>.+)|(?P<grouped>linear_fc[12]\.weight)(?P<index>\d+))$"
)


def expert_of(name: str) -> int | None:
    """The expert number in the megatron-core weight ``name`` (None: not an expert's weight)."""
    match = _EXPERT.match(name)
    if match is None:
        return None
    return int(match.group("local") if match.group("local") is not None else match.group("index"))


def with_expert(name: str, expert: int) -> str:
    """The expert weight ``name`` renumbered to ``expert``."""
    match = _EXPERT.match(name)
    if match is None:
        raise RLCoreError(f"{name!r} is not an expert's weight")
    if match.group("local") is not None:
        return f"{match.group('head')}local_experts.{expert}.{match.group('tail')}"
    return f"{match.group('head')}{match.group('grouped')}{expert}"


def _expert_name(prefix: str, expert: int, fc: int, names: Literal["local", "te"]) -> str:
    """megatron-core's name of expert ``expert``'s ``linear_fc<fc>`` weight under layer ``prefix``."""
    if names == "te":
        return f"{prefix}mlp.experts.linear_fc{fc}.weight{expert}"
    return f"{prefix}mlp.experts.local_experts.{expert}.linear_fc{fc}.weight"


def experts_to_megatron(
    layer: dict[str, torch.Tensor], prefix: str, spec: ModelSpec, names: Literal["local", "te"]
) -> dict[str, torch.Tensor]:
    """Pop a Hugging Face layer's router and fused experts from ``layer`` (layer-relative names) and return
    them under megatron-core names with ``prefix`` (``decoder.layers.<n>.``); a missing one raises KeyError."""
    gate_up = layer.pop("mlp.experts.gate_up_proj")
    down = layer.pop("mlp.experts.down_proj")
    out = {f"{prefix}mlp.router.weight": layer.pop("mlp.gate.weight")}
    if gate_up.shape[0] != spec.num_experts or down.shape[0] != spec.num_experts:
        raise RLCoreError(
            f"{prefix}: the Hugging Face experts hold {gate_up.shape[0]} and {down.shape[0]} experts, the config "
            f"says {spec.num_experts}"
        )
    for expert in range(spec.num_experts):
        out[_expert_name(prefix, expert, 1, names)] = gate_up[expert]
        out[_expert_name(prefix, expert, 2, names)] = down[expert]
    if spec.shared_expert_ffn:
        out[f"{prefix}{SHARED}linear_fc1.weight"] = torch.cat(
            [layer.pop("mlp.shared_expert.gate_proj.weight"), layer.pop("mlp.shared_expert.up_proj.weight")]
        )
        out[f"{prefix}{SHARED}linear_fc2.weight"] = layer.pop("mlp.shared_expert.down_proj.weight")
        out[f"{prefix}{SHARED}gate_weight"] = layer.pop("mlp.shared_expert_gate.weight")
    return out


def experts_to_hf(layer: Mapping[str, torch.Tensor], prefix: str, spec: ModelSpec) -> dict[str, torch.Tensor]:
    """The Hugging Face router and fused experts (names with ``prefix``, ``model.layers.<n>.``) of a
    megatron-core layer's ``mlp.*`` weights (layer-relative names, every expert present)."""
    fc1: dict[int, torch.Tensor] = {}
    fc2: dict[int, torch.Tensor] = {}
    out: dict[str, torch.Tensor] = {}
    for name, tensor in layer.items():
        expert = expert_of(name)
        if name == "mlp.router.weight":
            out[f"{prefix}mlp.gate.weight"] = tensor
        elif name == f"{SHARED}linear_fc1.weight" and spec.shared_expert_ffn:
            gate, up = tensor.chunk(2)
            out[f"{prefix}mlp.shared_expert.gate_proj.weight"] = gate.contiguous()
            out[f"{prefix}mlp.shared_expert.up_proj.weight"] = up.contiguous()
        elif name == f"{SHARED}linear_fc2.weight" and spec.shared_expert_ffn:
            out[f"{prefix}mlp.shared_expert.down_proj.weight"] = tensor
        elif name == f"{SHARED}gate_weight" and spec.shared_expert_ffn:
            out[f"{prefix}mlp.shared_expert_gate.weight"] = tensor
        elif expert is not None and "linear_fc1" in name:
            fc1[expert] = tensor
        elif expert is not None and "linear_fc2" in name:
            fc2[expert] = tensor
        else:
            raise RLCoreError(f"megatron-core weight {prefix}{name!r} has no Hugging Face counterpart")
    expected = list(range(spec.num_experts))
    if sorted(fc1) != expected or sorted(fc2) != expected:
        raise RLCoreError(
            f"{prefix}: expected experts 0..{spec.num_experts - 1} in the megatron-core state, got "
            f"{sorted(fc1)} (linear_fc1) and {sorted(fc2)} (linear_fc2)"
        )
    out[f"{prefix}mlp.experts.gate_up_proj"] = torch.stack([fc1[e] for e in expected])
    out[f"{prefix}mlp.experts.down_proj"] = torch.stack([fc2[e] for e in expected])
    return out


def local_experts(num_experts: int, ep_rank: int, ep_size: int) -> range:
    """The global expert numbers expert-parallel rank ``ep_rank`` (of ``ep_size``) holds: a contiguous
    ``num_experts / ep_size`` of them, as megatron-core assigns them."""
    if num_experts % ep_size:
        raise RLCoreError(f"expert_model_parallel_size={ep_size} must divide the model's {num_experts} experts")
    per_rank = num_experts // ep_size
    return range(ep_rank * per_rank, (ep_rank + 1) * per_rank)


def ep_shard(
    state: Mapping[str, torch.Tensor], ep_rank: int, ep_size: int, num_experts: int
) -> dict[str, torch.Tensor]:
    """The part of a megatron-core state (global expert numbers) that expert-parallel rank ``ep_rank`` holds:
    every non-expert weight, and its :func:`local_experts` renumbered from 0."""
    own = local_experts(num_experts, ep_rank, ep_size)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        expert = expert_of(name)
        if expert is None:
            out[name] = tensor
        elif expert in own:
            out[with_expert(name, expert - own.start)] = tensor
    return out


def ep_global_name(name: str, ep_rank: int, ep_size: int, num_experts: int) -> str:
    """The global name of expert-parallel rank ``ep_rank``'s weight ``name`` (local expert numbers; other
    weights keep their name)."""
    expert = expert_of(name)
    if expert is None:
        return name
    return with_expert(name, local_experts(num_experts, ep_rank, ep_size).start + expert)
