"""Multi-token prediction (MTP, ``actor_rollout_ref.model.mtp``) on the Megatron backend, as verl trains it.

A model with MTP layers (the Hugging Face config's ``num_nextn_predict_layers``, MiMo's and DeepSeek-V3's name, or
``mtp_num_hidden_layers``, Qwen3-Next's) gets megatron-core's ``MultiTokenPredictionBlock`` on its last stage when
``mtp.enable`` is true; its weights load from and export to MiMo's Hugging Face names ``model.mtp_layers.<i>.*``
(:func:`mtp_to_megatron`, :func:`mtp_to_hf`). With ``mtp.enable`` false the model is built without them, the
checkpoint's MTP weights are dropped and the exported config says 0 MTP layers (verl's ``check_mtp_config``).

The policy's log-probs never depend on the MTP layers: :func:`mtp_postprocess` runs them only when the engine
passes ``labels`` (the update, with ``mtp.enable_train``). MTP layer ``k`` (1-based) predicts token ``t + k + 1``
at position ``t``; its loss is the mean cross-entropy over the positions whose target is a response token (verl's
``loss_mask`` from the response mask, rolled as megatron-core rolls it), and the update adds
``mtp_loss_scaling_factor / num_layers × Σ_k loss_k`` (per micro-batch, averaged over the micro-batches) to the
policy loss, which is what megatron-core's ``MTPLossAutoScaler`` does in verl. The metric
``actor/mtp_losses/mtp_<k>_loss`` is each layer's unscaled loss (verl's name).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from rlcore.api import RLCoreError
from rlcore_plugin_megatron.config import MTP_KEY
from rlcore_plugin_megatron.convert import ModelSpec, hf_to_megatron, megatron_to_hf

__all__ = ["MTP_KEY", "install", "mtp_layers_to_build", "mtp_targets", "mtp_to_hf", "mtp_to_megatron"]
#: the Hugging Face config fields that give the number of MTP layers (MiMo/DeepSeek-V3, Qwen3-Next)
LAYER_FIELDS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")
#: the Hugging Face weights of the MTP layers (MiMo's names)
HF_PREFIX = "model.mtp_layers."
#: the megatron-core weights of the MTP block
MC_PREFIX = "mtp.layers."
#: a MiMo MTP layer's own weights -> megatron-core's ``MultiTokenPredictionLayer`` names (the rest is its
#: transformer layer, converted as a decoder layer)
_OWN = {
    "token_layernorm.weight": "enorm.weight",
    "hidden_layernorm.weight": "hnorm.weight",
    "final_layernorm.weight": "final_layernorm.weight",
}


def mtp_layer_count(hf_config: Any) -> int:
    """The number of MTP layers the Hugging Face config declares (0: none)."""
    for name in LAYER_FIELDS:
        value = getattr(hf_config, name, None)
        if value:
            return int(value)
    return 0


def drop_mtp_layers(hf_config: Any) -> None:
    """Set the config's MTP layer count to 0 (``mtp.enable=false``: the model is built and exported without them)."""
    for name in LAYER_FIELDS:
        if getattr(hf_config, name, None):
            setattr(hf_config, name, 0)


def read_mtp_weights(path: str, key: str) -> dict[str, torch.Tensor]:
    """The ``model.mtp_layers.*`` tensors of the safetensors checkpoint in directory ``path`` (float32, CPU),
    which transformers does not load for a model class without MTP layers; errors name ``key``."""
    from safetensors import safe_open

    directory = Path(path)
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        files = sorted({directory / name for name in json.loads(index.read_text())["weight_map"].values()})
    else:
        files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise RLCoreError(f"{key}.path={path!r}: MTP weights are read from a local safetensors checkpoint; none there")
    out: dict[str, torch.Tensor] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (safe_open has keys(), no iteration)
                if name.startswith(HF_PREFIX):
                    out[name] = handle.get_tensor(name).float()
    return out


def _layer_spec(spec: ModelSpec, count: int) -> ModelSpec:
    """``spec`` with ``count`` layers, to convert the MTP layers' transformer layers as decoder layers."""
    return dataclasses.replace(spec, num_layers=count, tied=True)


def mtp_to_megatron(state: Mapping[str, torch.Tensor], spec: ModelSpec, count: int) -> dict[str, torch.Tensor]:
    """megatron-core's ``mtp.layers.<i>.*`` weights from MiMo's ``model.mtp_layers.<i>.*`` (``count`` layers).

    MiMo's ``input_proj`` reads ``[hidden; embedding]``, megatron-core's ``eh_proj`` ``[embedding; hidden]``: the
    two column halves swap. A missing or unknown weight is an error naming it."""
    layers: dict[str, torch.Tensor] = {}
    out: dict[str, torch.Tensor] = {}
    hidden = spec.hidden_size
    for name, tensor in state.items():
        index, _, rest = name.removeprefix(HF_PREFIX).partition(".")
        if not name.startswith(HF_PREFIX) or not index.isdigit() or int(index) >= count:
            raise RLCoreError(f"Hugging Face weight {name!r} is not one of the model's {count} MTP layers")
        prefix = f"{MC_PREFIX}{index}."
        if rest in _OWN:
            out[prefix + _OWN[rest]] = tensor
        elif rest == "input_proj.weight":
            out[prefix + "eh_proj.weight"] = torch.cat([tensor[:, hidden:], tensor[:, :hidden]], dim=1)
        else:
            layers[f"model.layers.{index}.{rest}"] = tensor
    for name, tensor in hf_to_megatron(layers, _layer_spec(spec, count)).items():
        index, _, rest = name.removeprefix("decoder.layers.").partition(".")
        out[f"{MC_PREFIX}{index}.transformer_layer.{rest}"] = tensor
    expected = {f"{MC_PREFIX}{i}.{own}" for i in range(count) for own in (*_OWN.values(), "eh_proj.weight")}
    if expected - out.keys():
        raise RLCoreError(f"the checkpoint lacks the MTP weights of {sorted(expected - out.keys())}")
    return out


def mtp_to_hf(state: Mapping[str, torch.Tensor], spec: ModelSpec, count: int) -> dict[str, torch.Tensor]:
    """MiMo's ``model.mtp_layers.<i>.*`` from megatron-core's ``mtp.layers.<i>.*`` (the inverse of
    :func:`mtp_to_megatron`)."""
    own = {mc: hf for hf, mc in _OWN.items()}
    layers: dict[str, torch.Tensor] = {}
    out: dict[str, torch.Tensor] = {}
    hidden = spec.hidden_size
    for name, tensor in state.items():
        index, _, rest = name.removeprefix(MC_PREFIX).partition(".")
        prefix = f"{HF_PREFIX}{index}."
        if rest in own:
            out[prefix + own[rest]] = tensor
        elif rest == "eh_proj.weight":
            out[prefix + "input_proj.weight"] = torch.cat([tensor[:, hidden:], tensor[:, :hidden]], dim=1)
        elif rest.startswith("transformer_layer."):
            layers[f"decoder.layers.{index}.{rest.removeprefix('transformer_layer.')}"] = tensor
        else:
            raise RLCoreError(f"megatron-core weight {name!r} has no Hugging Face counterpart")
    for name, tensor in megatron_to_hf(layers, _layer_spec(spec, count)).items():
        out[HF_PREFIX + name.removeprefix("model.layers.")] = tensor
    return out


def _roll(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` shifted one position left along the last dimension, 0 at the end (megatron-core's
    ``roll_tensor`` without context parallelism)."""
    rolled = torch.roll(tensor, -1, dims=-1)
    rolled[..., -1] = 0
    return rolled


def detach_embeddings(layer: Any) -> None:
    """``mtp.detach_encoder``: the MTP ``layer`` reads the token embeddings and the decoder's hidden states
    detached, so that its loss trains the MTP layer (and the shared output layer) only."""
    original = layer._get_embeddings

    def _get_embeddings(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
        *ids, decoder_input, hidden = original(*args, **kwargs)
        return (*ids, decoder_input.detach(), hidden.detach().requires_grad_())

    layer._get_embeddings = _get_embeddings


def mtp_postprocess(
    self: Any,
    hidden_states: torch.Tensor,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    labels: torch.Tensor | None,
    rotary_pos_emb: Any,
    rotary_pos_cos: Any,
    rotary_pos_sin: Any,
    mtp_in_postprocess: bool | None = None,
    loss_mask: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    packed_seq_params: Any = None,
    sequence_len_offset: Any = None,
    runtime_gather_output: bool | None = None,
    extra_block_kwargs: dict[str, Any] | None = None,
    **_unused: Any,
) -> torch.Tensor:
    """``GPTModel._postprocess`` of a model with MTP layers (bound by :func:`install`): the logits ``[B, T, V]`` of
    the decoder's hidden states, always; with ``labels`` (the next token at each position) and ``loss_mask`` (the
    positions whose next token counts), the MTP layers run too and each one's mean cross-entropy is left in
    ``self.mtp_losses`` for the engine (megatron-core 0.16's own ``_postprocess`` runs the MTP layers on every
    forward and fails without labels)."""
    weight = self.shared_embedding_or_output_weight() if self.share_embeddings_and_output_weights else None
    self.mtp_losses = []
    if mtp_in_postprocess and labels is not None and loss_mask is not None:
        stacked = self.mtp(
            input_ids=input_ids,
            position_ids=position_ids,
            hidden_states=hidden_states,
            attention_mask=attention_mask,
            rotary_pos_emb=rotary_pos_emb,
            rotary_pos_cos=rotary_pos_cos,
            rotary_pos_sin=rotary_pos_sin,
            packed_seq_params=packed_seq_params,
            sequence_len_offset=sequence_len_offset,
            embedding=self.embedding,
            **(extra_block_kwargs or {}),
        )
        chunks = torch.chunk(stacked, 1 + self.config.mtp_num_layers, dim=0)
        hidden_states = chunks[0]
        targets, mask = labels, loss_mask.float()
        for depth in range(self.config.mtp_num_layers):
            logits, _ = self.output_layer(chunks[depth + 1], weight=weight, runtime_gather_output=True)
            targets, mask = _roll(targets), _roll(mask)
            # logits [T, B, V] -> per-token cross-entropy [B, T]
            token_loss = torch.nn.functional.cross_entropy(
                logits.transpose(0, 1).float().flatten(0, 1), targets.flatten(), reduction="none"
            ).view_as(mask)
            self.mtp_losses.append((token_loss * mask).sum() / mask.sum().clamp(min=1))
    logits, _ = self.output_layer(hidden_states, weight=weight, runtime_gather_output=runtime_gather_output)
    return logits.transpose(0, 1).contiguous()


def install(model: Any, detach_encoder: bool) -> None:
    """Give a ``GPTModel`` with an MTP block :func:`mtp_postprocess` (and, ``detach_encoder``, detached MTP
    inputs: :func:`detach_embeddings`)."""
    model._postprocess = mtp_postprocess.__get__(model, type(model))
    model.mtp_losses = []
    if detach_encoder:
        for layer in model.mtp.layers:
            detach_embeddings(layer)


def mtp_targets(
    input_ids: torch.Tensor, positions: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``labels`` and ``loss_mask`` ``[B, T]`` of a micro-batch in the model's layout: the next token at each
    position, and 1 where that next token is a counted response token (``positions`` ``[B, R]``: the positions
    whose outputs predict the response tokens; ``response_mask`` ``[B, R]``)."""
    labels = _roll(input_ids)
    loss_mask = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    loss_mask.scatter_(1, positions, response_mask.float())
    return labels, loss_mask


def mtp_layers_to_build(mtp: Any, hf_config: Any, settings: Any, *, is_moe: bool) -> int:
    """How many MTP layers the engine builds for the model section's ``mtp`` (verl's ``MtpConfig`` keys) and
    ``hf_config``: 0 when ``mtp.enable`` is false (the config's count is then
    set to 0, :func:`drop_mtp_layers`), else the config's count. Errors name the key: ``enable`` on a model
    without MTP layers (as verl's), ``enable_train``/``enable_rollout`` without ``enable``, and a layout or model
    this engine does not train MTP with (pipeline, virtual pipeline, tensor or context parallelism; a
    mixture-of-experts model)."""
    if not mtp.enable:
        for name in ("enable_train", "enable_rollout"):
            if getattr(mtp, name):
                raise RLCoreError(f"{MTP_KEY}.{name}=true needs {MTP_KEY}.enable=true (the model's MTP layers)")
        drop_mtp_layers(hf_config)
        return 0
    count = mtp_layer_count(hf_config)
    if count == 0:
        raise RLCoreError(
            f"{MTP_KEY}.enable=true, but the model has no MTP layers (its config.json sets none of "
            f"{', '.join(LAYER_FIELDS)}); use a model with MTP layers or set enable=false"
        )
    sizes = {
        "tensor_model_parallel_size": settings.tp,
        "pipeline_model_parallel_size": settings.pp,
        "virtual_pipeline_model_parallel_size": settings.vpp,
        "context_parallel_size": settings.cp,
    }
    for name, size in sizes.items():
        if size != 1:
            raise RLCoreError(
                f"{MTP_KEY}.enable=true with {settings.key}.{name}={size}: rlcore's Megatron engine builds MTP layers "
                "on a model that is not split (tensor, pipeline and context parallel sizes 1; data parallelism is "
                f"fine); set {name}=1 or {MTP_KEY}.enable=false"
            )
    if is_moe:
        raise RLCoreError(
            f"{MTP_KEY}.enable=true with a mixture-of-experts model: rlcore's Megatron engine builds MTP layers for "
            "dense models only"
        )
    return count
