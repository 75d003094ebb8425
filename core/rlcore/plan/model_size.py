"""The sizes of the policy model that the planner needs, read from its Hugging Face config.

The parameters are counted by building the model on PyTorch's ``meta`` device (no memory, no weights read),
so every architecture transformers knows is counted exactly, tied embeddings once. torch and transformers
are imported here only, when a plan is made.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from rlcore_plugin_hf.chunking import ModelShape

from rlcore.errors import RLCoreError


@dataclass(frozen=True)
class ModelSize:
    """What the planner knows about a model.

    Attributes:
        shape: layers, hidden, intermediate, heads, kv heads, head dim, vocabulary.
        params: distinct parameters (elements).
        param_tensors: distinct parameter tensors (AdamW keeps one step counter per tensor).
        layer_params: parameters of one decoder layer (what FSDP gathers at a time).
        embedding_params: parameters of the input embedding (left out of the FLOPs).
        tied: whether the output projection shares the input embedding.
        shapes: each distinct parameter tensor as ``(rows, elements per row)`` (FSDP2 shards the rows).
        qkv_bias: the q/k/v projections have biases (Qwen2).
        qk_norm: the attention has per-head q/k norms (Qwen3).
    """

    shape: ModelShape
    params: int
    param_tensors: int
    layer_params: int
    embedding_params: int
    tied: bool
    shapes: tuple[tuple[int, int], ...] = ()
    qkv_bias: bool = False
    qk_norm: bool = False

    def shard_elements(self, shards: int) -> int:
        """Parameter elements one of ``shards`` ranks holds: each tensor's rows split evenly, the last shard
        padded (as FSDP2's ``fully_shard`` does); every element on one rank."""
        if shards <= 1 or not self.shapes:
            return -(-self.params // max(1, shards))
        return sum(-(-rows // shards) * per_row for rows, per_row in self.shapes)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data."""
        return {
            "params": self.params,
            "param_tensors": self.param_tensors,
            "layer_params": self.layer_params,
            "embedding_params": self.embedding_params,
            "tied_embeddings": self.tied,
            **{name: getattr(self.shape, name) for name in self.shape.__dataclass_fields__},
        }


def load_hf_config(
    path: str, trust_remote_code: bool, override: dict[str, Any] | None = None, *, offline: bool = False
) -> Any:
    """``AutoConfig`` of the model at ``path`` (a folder, or a hub name: from the local cache, else, unless
    ``offline``, from the hub when it can be reached) with ``override`` applied; an error names
    ``actor_rollout_ref.model.path``."""
    from transformers import AutoConfig

    from rlcore.model_check import HUB, hub_unreachable

    key = "actor_rollout_ref.model.path"
    local = os.path.exists(os.path.expanduser(path)) or path.startswith(("/", ".", "~"))
    if offline and not local:
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(path, "config.json"), str):
            raise RLCoreError(f"{key}={path}: the model's config is not in the local cache")
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)
    except (OSError, ValueError) as exc:
        if offline and not local:
            raise RLCoreError(f"{key}={path}: the model's config is not in the local cache") from exc
        unreachable = None if local else hub_unreachable(os.environ.get("HF_ENDPOINT") or HUB)
        if local or unreachable or os.environ.get("HF_HUB_OFFLINE", "") in ("1", "true", "True", "YES", "yes"):
            why = str(exc).splitlines()[0]
            if unreachable:
                why = f"the hub cannot be reached: {unreachable}"
            elif local and not os.path.exists(os.path.expanduser(path)):
                why = "no such folder"
            raise RLCoreError(f"{key}={path}: cannot read the model's config ({why})") from exc
        try:
            config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as online:
            raise RLCoreError(f"{key}={path}: cannot read the model's config ({online})") from online
    for name, value in (override or {}).items():
        setattr(config, name, value)
    return config


def model_size(hf_config: Any) -> ModelSize:
    """The :class:`ModelSize` of the causal LM that ``hf_config`` describes (built on the meta device)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    params = list(model.parameters())
    embedding = model.get_input_embeddings()
    output = model.get_output_embeddings()
    tied = output is not None and output.weight is embedding.weight
    layers = _decoder_layers(model)
    attention = getattr(layers[0], "self_attn", None) if layers else None
    return ModelSize(
        shape=ModelShape.of(hf_config),
        params=sum(p.numel() for p in params),
        param_tensors=len(params),
        layer_params=sum(p.numel() for p in layers[0].parameters()) if layers else 0,
        embedding_params=embedding.weight.numel(),
        tied=tied,
        shapes=tuple((p.shape[0] if p.dim() else 1, p[0].numel() if p.dim() else 1) for p in params),
        qkv_bias=attention is not None and getattr(getattr(attention, "q_proj", None), "bias", None) is not None,
        qk_norm=attention is not None and getattr(attention, "q_norm", None) is not None,
    )


def _decoder_layers(model: Any) -> list[Any]:
    """The repeated blocks: the first ``ModuleList`` named ``layers``, ``h`` or ``blocks``."""
    import torch

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] in ("layers", "h", "blocks"):
            return list(module)
    return []


#: :func:`model_size_at`'s answers in this process, by model path, ``config.json``'s stamp and the arguments
_SIZES: dict[tuple[Any, ...], ModelSize] = {}


def model_size_at(path: str, trust_remote_code: bool, override: dict[str, Any], *, offline: bool) -> ModelSize:
    """:func:`model_size` of the model at ``path`` (``load_hf_config``'s arguments), remembered for the life of
    the process while the folder's ``config.json`` is unchanged (its modification time and size): many dry runs
    in one process (a notebook, the tests) read the config and build the meta model once."""
    config_file = os.path.join(os.path.expanduser(path), "config.json")
    stamp = (os.stat(config_file).st_mtime_ns, os.stat(config_file).st_size) if os.path.isfile(config_file) else None
    key = (path, stamp, trust_remote_code, repr(sorted(override.items())), offline)
    if key not in _SIZES:
        _SIZES[key] = model_size(load_hf_config(path, trust_remote_code, override, offline=offline))
    return _SIZES[key]
