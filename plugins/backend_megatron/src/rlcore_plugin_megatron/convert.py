"""Hugging Face <-> megatron-core weight conversion for the Qwen2, Qwen3, Llama, Qwen3-MoE and Qwen2-MoE families.

Three layers, each a pure function of tensors:

- names and layouts (:func:`hf_to_megatron`, :func:`megatron_to_hf`): full, unsharded state dicts with
  global layer numbers. megatron-core fuses ``q_proj``/``k_proj``/``v_proj`` into ``linear_qkv``, grouped
  per query group (the query heads of group ``g``, then its key head, then its value head), and
  ``gate_proj``/``up_proj`` into ``linear_fc1`` (gate rows first). Names follow megatron-core's local
  layer spec (``names="local"``, what the engine builds) or the Transformer Engine spec (``names="te"``,
  where the two pre-norms are fused into the following linear layer as ``layer_norm_weight``), so
  checkpoints of either spec convert.
- tensor parallelism (:func:`tp_shard`, :func:`tp_unshard`): which dimension each weight is split along;
  ``linear_fc1`` is split per half, so that every rank holds its gate rows and its up rows.
- pipeline parallelism (:func:`stage_layers`, :func:`to_stage`, :func:`from_stage`): which global layers a
  stage holds and the stage-local names (``decoder.layers.<local>``).

Qwen3-MoE layers (:mod:`rlcore_plugin_megatron.moe_convert`): the router ``mlp.gate.weight`` is
``mlp.router.weight``; the fused experts ``mlp.experts.gate_up_proj [E, 2I, H]`` (gate rows first) and
``mlp.experts.down_proj [E, H, I]`` are expert ``e``'s ``linear_fc1`` and ``linear_fc2``
(``mlp.experts.local_experts.<e>.linear_fc{1,2}.weight`` on the local spec, ``mlp.experts.linear_fc{1,2}.weight<e>``
in the grouped form of ``names="te"``); expert parallelism (:func:`ep_shard`) gives each rank ``E / ep`` of them.

With tied embeddings the Hugging Face side has no ``lm_head.weight`` (it is an alias of
``model.embed_tokens.weight``) and megatron-core has no ``output_layer.weight``. A critic's value model
carries ``value_head.weight``/``value_head.bias`` (megatron: the replicated ``output_layer``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch

from rlcore.api import RLCoreError
from rlcore_plugin_megatron.lora import adapter_partition_dim, is_adapter
from rlcore_plugin_megatron.moe_convert import expert_of, experts_to_hf, experts_to_megatron

Names = Literal["local", "te"]
#: Hugging Face ``model_type`` values whose decoder layer the converter maps
SUPPORTED_MODEL_TYPES: tuple[str, ...] = ("qwen2", "qwen3", "llama", "qwen3_moe", "qwen2_moe")
#: the mixture-of-experts model types among them
MOE_MODEL_TYPES: tuple[str, ...] = ("qwen3_moe", "qwen2_moe")
_LAYER = re.compile(r"^(model\.layers|decoder\.layers)\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class ModelSpec:
    """The shape of a supported decoder model, read from its Hugging Face config.

    Attributes:
        num_layers, hidden_size, ffn_hidden_size, vocab_size: the model's sizes.
        num_heads, num_query_groups, head_dim: attention heads (GQA: query groups = key/value heads).
        qkv_bias: the query/key/value projections have biases (Qwen2).
        qk_norm: per-head RMSNorm of queries and keys before RoPE (Qwen3).
        tied: the output layer is the input embedding.
        value_head: a critic: the language-model head is replaced by a scalar ``value_head``.
        num_experts: experts of every (sparse) decoder layer of a mixture-of-experts model (0: dense).
        moe_topk: experts each token is routed to.
        moe_ffn_hidden_size: the intermediate size of one expert.
        norm_topk_prob: the top-k routing weights are renormalised to sum to 1 (Qwen3-MoE's default).
        router_aux_loss_coef: the load-balancing loss coefficient of the Hugging Face config.
        shared_expert_ffn: the intermediate size of Qwen2-MoE's shared expert (0: none), whose output every token
            gets, scaled by ``sigmoid(shared_expert_gate(x))``.
    """

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    vocab_size: int
    num_heads: int
    num_query_groups: int
    head_dim: int
    qkv_bias: bool
    qk_norm: bool
    tied: bool
    value_head: bool = False
    num_experts: int = 0
    moe_topk: int = 0
    moe_ffn_hidden_size: int = 0
    norm_topk_prob: bool = True
    router_aux_loss_coef: float = 0.0
    shared_expert_ffn: int = 0

    @property
    def is_moe(self) -> bool:
        """Whether the decoder layers are mixture-of-experts layers."""
        return self.num_experts > 0

    @classmethod
    def from_hf_config(cls, hf_config: Any, key: str, *, value_head: bool = False) -> ModelSpec:
        """The spec of ``hf_config`` (a transformers ``PretrainedConfig`` of the model at config ``key``);
        an architecture or option the converter does not map is an error naming ``key``."""
        model_type = getattr(hf_config, "model_type", None)
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise RLCoreError(
                f"{key}: model_type {model_type!r} is not supported by the megatron backend "
                f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)}); use the fsdp backend for it"
            )
        if getattr(hf_config, "hidden_act", "silu") != "silu":
            raise RLCoreError(f"{key}: hidden_act={hf_config.hidden_act!r} is not supported (only silu)")
        if getattr(hf_config, "mlp_bias", False):
            raise RLCoreError(f"{key}: mlp_bias=true is not supported by the megatron backend")
        if model_type == "llama" and getattr(hf_config, "attention_bias", False):
            raise RLCoreError(f"{key}: a Llama model with attention_bias=true is not supported by the megatron backend")
        if getattr(hf_config, "use_sliding_window", False):
            raise RLCoreError(f"{key}: sliding-window attention is not supported by the megatron backend")
        heads = int(hf_config.num_attention_heads)
        groups = int(getattr(hf_config, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads)
        qkv_bias = (
            model_type == "qwen2"
            or bool(getattr(hf_config, "attention_bias", False))
            or (model_type == "qwen2_moe" and bool(getattr(hf_config, "qkv_bias", True)))
        )
        moe: dict[str, Any] = {}
        if model_type in MOE_MODEL_TYPES:
            if int(getattr(hf_config, "decoder_sparse_step", 1)) != 1 or list(
                getattr(hf_config, "mlp_only_layers", [])
            ):
                raise RLCoreError(
                    f"{key}: a {model_type} model with dense layers (decoder_sparse_step != 1 or mlp_only_layers) is not "
                    "supported by the megatron backend: every decoder layer must be sparse"
                )
            moe = {
                "num_experts": int(hf_config.num_experts),
                "moe_topk": int(hf_config.num_experts_per_tok),
                "moe_ffn_hidden_size": int(hf_config.moe_intermediate_size),
                "norm_topk_prob": bool(getattr(hf_config, "norm_topk_prob", True)),
                "router_aux_loss_coef": float(getattr(hf_config, "router_aux_loss_coef", 0.0) or 0.0),
                "shared_expert_ffn": int(getattr(hf_config, "shared_expert_intermediate_size", 0) or 0)
                if model_type == "qwen2_moe"
                else 0,
            }
        return cls(
            num_layers=int(hf_config.num_hidden_layers),
            hidden_size=int(hf_config.hidden_size),
            ffn_hidden_size=int(hf_config.intermediate_size),
            vocab_size=int(hf_config.vocab_size),
            num_heads=heads,
            num_query_groups=groups,
            head_dim=head_dim,
            qkv_bias=qkv_bias,
            qk_norm=model_type in ("qwen3", "qwen3_moe"),
            tied=bool(getattr(hf_config, "tie_word_embeddings", False)) and not value_head,
            value_head=value_head,
            **moe,
        )


def _layer_names(names: Names, *, moe: bool = False) -> dict[str, str]:
    """Hugging Face layer-relative name -> megatron-core layer-relative name (weights other than q/k/v and
    gate/up, which are fused, and the experts). A mixture-of-experts layer keeps its pre-MLP norm apart from
    the experts in both specs (the router reads the normalised input)."""
    input_norm = "self_attention.linear_qkv.layer_norm_weight" if names == "te" else "input_layernorm.weight"
    mlp_norm = "mlp.linear_fc1.layer_norm_weight" if names == "te" and not moe else "pre_mlp_layernorm.weight"
    return {
        "input_layernorm.weight": input_norm,
        "post_attention_layernorm.weight": mlp_norm,
        "self_attn.o_proj.weight": "self_attention.linear_proj.weight",
        "self_attn.q_norm.weight": "self_attention.q_layernorm.weight",
        "self_attn.k_norm.weight": "self_attention.k_layernorm.weight",
        "mlp.down_proj.weight": "mlp.linear_fc2.weight",
    }


def _fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec: ModelSpec) -> torch.Tensor:
    """``linear_qkv`` rows (weight or bias) from Hugging Face's separate projections, grouped per query group."""
    groups, per_group = spec.num_query_groups, spec.num_heads // spec.num_query_groups
    rest = q.shape[1:]
    parts = (
        q.reshape(groups, per_group * spec.head_dim, *rest),
        k.reshape(groups, spec.head_dim, *rest),
        v.reshape(groups, spec.head_dim, *rest),
    )
    return torch.cat(parts, dim=1).reshape(-1, *rest)


def _split_qkv(qkv: torch.Tensor, spec: ModelSpec) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The inverse of :func:`_fuse_qkv`."""
    groups, per_group = spec.num_query_groups, spec.num_heads // spec.num_query_groups
    rest = qkv.shape[1:]
    grouped = qkv.reshape(groups, (per_group + 2) * spec.head_dim, *rest)
    q, k, v = grouped.split([per_group * spec.head_dim, spec.head_dim, spec.head_dim], dim=1)
    return q.reshape(-1, *rest), k.reshape(-1, *rest), v.reshape(-1, *rest)


def hf_to_megatron(
    state: Mapping[str, torch.Tensor], spec: ModelSpec, *, names: Names = "local"
) -> dict[str, torch.Tensor]:
    """A full megatron-core state dict (global layer numbers) from a Hugging Face one.

    Unknown or missing Hugging Face names are errors; ``lm_head.weight`` is ignored when tied (and for a
    value model). A value model without ``value_head.*`` gets a zero head (every initial value 0).
    """
    out: dict[str, torch.Tensor] = {}
    per_layer: dict[int, dict[str, torch.Tensor]] = {}
    renames = _layer_names(names, moe=spec.is_moe)
    for name, tensor in state.items():
        match = _LAYER.match(name)
        if match and match.group(1) == "model.layers":
            per_layer.setdefault(int(match.group(2)), {})[match.group(3)] = tensor
        elif name == "model.embed_tokens.weight":
            out["embedding.word_embeddings.weight"] = tensor
        elif name == "model.norm.weight":
            out["decoder.final_layernorm.weight"] = tensor
        elif name == "lm_head.weight":
            if not spec.tied and not spec.value_head:
                out["output_layer.weight"] = tensor
        elif name in ("value_head.weight", "value_head.bias") and spec.value_head:
            out[name.replace("value_head", "output_layer")] = tensor
        elif not name.endswith("rotary_emb.inv_freq"):
            raise RLCoreError(f"Hugging Face weight {name!r} has no megatron-core counterpart")
    if sorted(per_layer) != list(range(spec.num_layers)):
        raise RLCoreError(
            f"expected layers 0..{spec.num_layers - 1} in the Hugging Face state, got {sorted(per_layer)}"
        )
    for index, layer in per_layer.items():
        prefix = f"decoder.layers.{index}."
        try:
            out[prefix + "self_attention.linear_qkv.weight"] = _fuse_qkv(
                layer.pop("self_attn.q_proj.weight"),
                layer.pop("self_attn.k_proj.weight"),
                layer.pop("self_attn.v_proj.weight"),
                spec,
            )
            if spec.qkv_bias:
                out[prefix + "self_attention.linear_qkv.bias"] = _fuse_qkv(
                    layer.pop("self_attn.q_proj.bias"),
                    layer.pop("self_attn.k_proj.bias"),
                    layer.pop("self_attn.v_proj.bias"),
                    spec,
                )
            if spec.is_moe:
                out.update(experts_to_megatron(layer, prefix, spec, names))
            else:
                out[prefix + "mlp.linear_fc1.weight"] = torch.cat(
                    [layer.pop("mlp.gate_proj.weight"), layer.pop("mlp.up_proj.weight")]
                )
        except KeyError as exc:
            raise RLCoreError(f"Hugging Face state lacks model.layers.{index}.{exc.args[0]}") from exc
        for hf_name, tensor in layer.items():
            if hf_name not in renames:
                raise RLCoreError(
                    f"Hugging Face weight model.layers.{index}.{hf_name} has no megatron-core counterpart"
                )
            out[prefix + renames[hf_name]] = tensor
    if spec.value_head and "output_layer.weight" not in out:
        out["output_layer.weight"] = torch.zeros(1, spec.hidden_size)
        out["output_layer.bias"] = torch.zeros(1)
    return out


def megatron_to_hf(
    state: Mapping[str, torch.Tensor], spec: ModelSpec, *, names: Names = "local"
) -> dict[str, torch.Tensor]:
    """A Hugging Face state dict from a full megatron-core one (the inverse of :func:`hf_to_megatron`).

    Tied models get no ``lm_head.weight``; a value model's head comes out as ``value_head.*``.
    """
    renames = {mc: hf for hf, mc in _layer_names(names, moe=spec.is_moe).items()}
    out: dict[str, torch.Tensor] = {}
    experts: dict[int, dict[str, torch.Tensor]] = {}
    for name, tensor in state.items():
        match = _LAYER.match(name)
        if match and match.group(1) == "decoder.layers":
            prefix, rest = f"model.layers.{match.group(2)}.", match.group(3)
            if spec.is_moe and rest.startswith("mlp."):
                experts.setdefault(int(match.group(2)), {})[rest] = tensor
            elif rest in ("self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias"):
                kind = rest.rsplit(".", 1)[1]
                for proj, part in zip(("q_proj", "k_proj", "v_proj"), _split_qkv(tensor, spec)):
                    out[f"{prefix}self_attn.{proj}.{kind}"] = part.contiguous()
            elif rest == "mlp.linear_fc1.weight":
                gate, up = tensor.chunk(2)
                out[prefix + "mlp.gate_proj.weight"], out[prefix + "mlp.up_proj.weight"] = (
                    gate.contiguous(),
                    up.contiguous(),
                )
            elif rest in renames:
                out[prefix + renames[rest]] = tensor
            else:
                raise RLCoreError(f"megatron-core weight {name!r} has no Hugging Face counterpart")
        elif name == "embedding.word_embeddings.weight":
            out["model.embed_tokens.weight"] = tensor
        elif name == "decoder.final_layernorm.weight":
            out["model.norm.weight"] = tensor
        elif name in ("output_layer.weight", "output_layer.bias"):
            if spec.value_head:
                out[name.replace("output_layer", "value_head")] = tensor
            elif name == "output_layer.weight" and not spec.tied:
                out["lm_head.weight"] = tensor
        else:
            raise RLCoreError(f"megatron-core weight {name!r} has no Hugging Face counterpart")
    for index, layer in sorted(experts.items()):
        out.update(experts_to_hf(layer, f"model.layers.{index}.", spec))
    return out


# ---------------------------------------------------------------- tensor parallelism
def partition_dim(name: str, spec: ModelSpec) -> int | None:
    """The dimension along which tensor parallelism splits the megatron-core weight ``name`` (None:
    replicated on every tensor-parallel rank; experts and routers are never split: ``expert_tensor_parallel_size``
    is 1; LoRA's adapter matrices: :func:`~rlcore_plugin_megatron.lora.adapter_partition_dim`)."""
    if is_adapter(name):
        return adapter_partition_dim(name)
    if expert_of(name) is not None or name.endswith("mlp.router.weight"):
        return None
    if name.endswith(("linear_qkv.weight", "linear_qkv.bias", "linear_fc1.weight", "word_embeddings.weight")):
        return 0
    if name.endswith(("linear_proj.weight", "linear_fc2.weight")):
        return 1
    if name == "output_layer.weight" and not spec.value_head:
        return 0
    return None


def tp_shard(name: str, tensor: torch.Tensor, rank: int, size: int, spec: ModelSpec) -> torch.Tensor:
    """Tensor-parallel rank ``rank``'s part (of ``size``) of the full weight ``name``."""
    dim = partition_dim(name, spec)
    if dim is None or size == 1:
        return tensor
    if tensor.shape[dim] % size:
        raise RLCoreError(f"{name} has {tensor.shape[dim]} rows along dimension {dim}, not divisible by {size} ranks")
    if name.endswith("linear_fc1.weight"):
        gate, up = tensor.chunk(2)
        return torch.cat([gate.chunk(size)[rank], up.chunk(size)[rank]])
    return tensor.chunk(size, dim=dim)[rank]


def tp_unshard(name: str, shards: list[torch.Tensor], spec: ModelSpec) -> torch.Tensor:
    """The full weight ``name`` from every tensor-parallel rank's part (in rank order)."""
    dim = partition_dim(name, spec)
    if dim is None or len(shards) == 1:
        return shards[0]
    if name.endswith("linear_fc1.weight"):
        halves = [shard.chunk(2) for shard in shards]
        return torch.cat([torch.cat([gate for gate, _ in halves]), torch.cat([up for _, up in halves])])
    return torch.cat(shards, dim=dim)


# ---------------------------------------------------------------- pipeline parallelism
def stage_layers(num_layers: int, pp_size: int, pp_rank: int, key: str) -> range:
    """The global layer numbers pipeline stage ``pp_rank`` holds (an even split; ``key`` names the
    pipeline size in the error when it does not divide the layers)."""
    if num_layers % pp_size:
        raise RLCoreError(f"{key}={pp_size} must divide the model's {num_layers} layers")
    per_stage = num_layers // pp_size
    return range(pp_rank * per_stage, (pp_rank + 1) * per_stage)


def chunk_layers(num_layers: int, pp_size: int, vpp_size: int, pp_rank: int, key: str) -> list[range]:
    """The global layer numbers of each model chunk pipeline rank ``pp_rank`` holds: the layers split evenly
    into ``pp_size × vpp_size`` chunks, chunk ``c`` of the rank being global chunk ``c × pp_size + pp_rank``
    (megatron-core's interleaved assignment; one chunk per rank without virtual stages). ``key`` names the
    sizes in the error when they do not divide the layers."""
    chunks = pp_size * vpp_size
    if num_layers % chunks:
        raise RLCoreError(
            f"{key}: pipeline_model_parallel_size ({pp_size}) × virtual_pipeline_model_parallel_size ({vpp_size}) "
            f"= {chunks} must divide the model's {num_layers} layers"
        )
    return [stage_layers(num_layers, chunks, c * pp_size + pp_rank, key) for c in range(vpp_size)]


def stage_holds(name: str, layers: range, *, first: bool, last: bool, spec: ModelSpec) -> bool:
    """Whether a stage with global ``layers`` (``first``/``last`` stage) holds the full-model weight ``name``.

    With tied embeddings and several stages, the last stage holds its own copy of the embedding as
    ``output_layer.weight`` (see :func:`to_stage`).
    """
    match = _LAYER.match(name)
    if match:
        return int(match.group(2)) in layers
    if name.startswith("embedding."):
        return first
    return last


def to_stage(
    state: Mapping[str, torch.Tensor], layers: range, *, first: bool, last: bool, spec: ModelSpec
) -> dict[str, torch.Tensor]:
    """The part of a full megatron-core state that a pipeline stage holds, under stage-local names.

    A tied model split over several stages gets the embedding as ``output_layer.weight`` on its last stage
    (megatron-core keeps such a copy there and keeps it equal by reducing its gradient with the first
    stage's).
    """
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if not stage_holds(name, layers, first=first, last=last, spec=spec):
            continue
        match = _LAYER.match(name)
        if match:
            name = f"decoder.layers.{int(match.group(2)) - layers.start}.{match.group(3)}"
        out[name] = tensor
    if spec.tied and last and not first:
        out["output_layer.weight"] = state["embedding.word_embeddings.weight"]
    return out


def from_stage(
    state: Mapping[str, torch.Tensor], layers: range, *, first: bool, spec: ModelSpec
) -> dict[str, torch.Tensor]:
    """Full-model names for a stage's weights (the inverse of :func:`to_stage`; a tied model's copy of the
    embedding on a later stage is dropped)."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        match = _LAYER.match(name)
        if match:
            name = f"decoder.layers.{int(match.group(2)) + layers.start}.{match.group(3)}"
        elif name == "output_layer.weight" and spec.tied and not first:
            continue
        out[name] = tensor
    return out
