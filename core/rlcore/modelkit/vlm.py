"""Vision-language (Qwen2-VL-family) models in the training engines: which class loads them, the extra
forward inputs of a micro-batch, and freezing the vision tower.

A Batch row of a multimodal dataset carries ``non_tensors["multi_modal_inputs"]``: the processor's
``pixel_values`` ``[patches, C·t·p·p]`` and ``image_grid_thw`` ``[images, 3]`` for that row's images, and
``pixel_values_videos`` / ``video_grid_thw`` for its videos (None for a text-only row). The engine
concatenates each over the micro-batch's rows in order (the model scatters the image and video features
into the ``<|image_pad|>`` and ``<|video_pad|>`` positions in the same order) and replaces the 1-D
``position_ids`` by the model's own multimodal rotary (mrope) position ids, computed with its
``get_rope_index`` from ``input_ids``, the attention mask and the grids:

* padded: ``[3, B, T]`` (temporal, height, width) next to the attention mask;
* packed (``use_remove_padding``): ``[4, 1, nnz]``, the packed 1-D positions first: transformers' Qwen2-VL
  derives the block-diagonal mask of the packed sequences from that first row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from rlcore.api.batch import Batch
from rlcore.data.multimodal import MULTI_MODAL_INPUT_KEYS, MULTI_MODAL_INPUTS, VIDEO_INPUT_KEYS
from rlcore.errors import RLCoreError
from rlcore.modelkit.packing import PackedBatch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

#: ``model_type`` values of the vision-language architectures the engines train
VISION_LANGUAGE_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl")


def is_vision_language(hf_config: Any) -> bool:
    """Whether ``hf_config`` (a transformers config) describes a supported vision-language model."""
    return getattr(hf_config, "model_type", None) in VISION_LANGUAGE_MODEL_TYPES


def policy_loader(hf_config: Any) -> Any:
    """The Auto class that loads the policy (a language-modelling head): ``AutoModelForImageTextToText`` for
    vision-language models, ``AutoModelForCausalLM`` otherwise."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    return AutoModelForImageTextToText if is_vision_language(hf_config) else AutoModelForCausalLM


def rope_owner(model: nn.Module) -> Any | None:
    """The submodule of ``model`` (possibly wrapped by peft or FSDP) that computes mrope positions
    (``get_rope_index``), or None for a text-only model."""
    for module in model.modules():
        if hasattr(type(module), "get_rope_index"):
            return module
    return None


def vision_tower(model: nn.Module) -> nn.Module | None:
    """The vision encoder (``visual``, with its patch merger) of a vision-language ``model``, or None."""
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] == "visual":
            return module
    return None


def freeze_vision_tower(model: nn.Module, key: str) -> None:
    """``requires_grad=False`` on every parameter of the vision tower (LoRA adapters in it included), as
    verl's ``actor.freeze_vision_tower`` does; a model without one is an error naming ``key``."""
    tower = vision_tower(model)
    if tower is None:
        raise RLCoreError(f"{key}=true but the model has no vision tower (it is not a vision-language model)")
    tower.requires_grad_(False)


def stack_multimodal(entries: Iterable[Any], device: torch.device) -> dict[str, torch.Tensor]:
    """``pixel_values`` and ``image_grid_thw`` (images), ``pixel_values_videos`` and ``video_grid_thw``
    (videos) of the rows' ``multi_modal_inputs`` ``entries`` (None for a text-only row), each concatenated in
    row order on ``device``; only the pairs some row has (empty when no row has an image or a video).

    Raises:
        RLCoreError: an entry is not a mapping holding at least one of the pairs, both tensors of it.
    """
    stacked: dict[str, list[torch.Tensor]] = {}
    for row, entry in enumerate(entries):
        if entry is None:
            continue
        pairs = [
            pair
            for pair in (MULTI_MODAL_INPUT_KEYS, VIDEO_INPUT_KEYS)
            if isinstance(entry, Mapping) and pair[0] in entry
        ]
        if not pairs or any(grid not in entry for _, grid in pairs):
            raise RLCoreError(
                f"{MULTI_MODAL_INPUTS}[{row}] must map pixel_values and image_grid_thw (or pixel_values_videos and "
                f"video_grid_thw) to tensors, got {entry!r:.200}"
            )
        for pixels, grid in pairs:
            stacked.setdefault(pixels, []).append(torch.as_tensor(entry[pixels]))
            stacked.setdefault(grid, []).append(torch.as_tensor(entry[grid]).reshape(-1, 3))
    return {
        name: torch.cat(parts).to(device=device, dtype=torch.long if name.endswith("grid_thw") else None)
        for name, parts in stacked.items()
    }


def multimodal_tensors(batch: Batch, device: torch.device) -> dict[str, torch.Tensor]:
    """:func:`stack_multimodal` of ``batch``'s ``multi_modal_inputs`` (empty when it has none)."""
    return stack_multimodal(batch.non_tensors.get(MULTI_MODAL_INPUTS, ()), device)


def token_types(input_ids: torch.Tensor, hf_config: Any) -> torch.Tensor:
    """0 for text, 1 for image and 2 for video placeholder tokens (transformers' ``mm_token_type_ids``)."""
    types = torch.zeros_like(input_ids, dtype=torch.int)
    types[input_ids == hf_config.image_token_id] = 1
    types[input_ids == hf_config.video_token_id] = 2
    return types


def mrope_positions(
    owner: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    image_grid_thw: torch.Tensor | None,
    video_grid_thw: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[3, B, T]`` mrope position ids (0 at padding) from ``owner.get_rope_index``.

    Raises:
        RLCoreError: the rows' ``<|image_pad|>`` (``<|video_pad|>``) tokens do not match ``image_grid_thw``
            (``video_grid_thw``).
    """
    config = owner.config
    merge = owner.visual.spatial_merge_size**2
    for what, token_id, grid in (
        ("image", config.image_token_id, image_grid_thw),
        ("video", config.video_token_id, video_grid_thw),
    ):
        expected = 0 if grid is None else int((grid.prod(-1) // merge).sum())
        found = int(((input_ids == token_id) & attention_mask.bool()).sum())
        if found != expected:
            raise RLCoreError(
                f"the rows' input_ids hold {found} {what} tokens but their {MULTI_MODAL_INPUTS} ({what}_grid_thw) "
                f"describe {expected}: each row's {what}s must be the ones its prompt was rendered with"
            )
    positions, _ = owner.get_rope_index(
        input_ids,
        mm_token_type_ids=token_types(input_ids, config),
        image_grid_thw=image_grid_thw,
        video_grid_thw=video_grid_thw,
        attention_mask=attention_mask,
    )
    return positions


def load_policy(path: str, dtype: torch.dtype) -> PreTrainedModel:
    """The policy at ``path`` in ``dtype`` with the class :func:`policy_loader` picks."""
    from transformers import AutoConfig

    return policy_loader(AutoConfig.from_pretrained(path)).from_pretrained(path, dtype=dtype)


def rollout_prefill(
    module: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, entries: Iterable[Any]
) -> tuple[dict[str, Any], torch.Tensor]:
    """The prefill keyword arguments of left-padded prompts with the rows' ``multi_modal_inputs``
    ``entries`` (images, videos and mrope ``position_ids``) and the ``[B, 1]`` position of each row's first new
    token (one past its largest mrope position; decoding continues with 1-D positions from there).

    Raises:
        RLCoreError: a row has images or videos but ``module`` is not a vision-language model.
    """
    kwargs: dict[str, Any] = stack_multimodal(entries, input_ids.device)
    owner = rope_owner(module)
    if owner is None:
        if kwargs:
            raise RLCoreError(
                f"the prompts carry images or videos ({MULTI_MODAL_INPUTS}) but the rollout model is not a "
                "vision-language model"
            )
        positions = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)
        return {"position_ids": positions}, positions[:, -1:] + 1
    positions = mrope_positions(
        owner, input_ids, attention_mask, kwargs.get("image_grid_thw"), kwargs.get("video_grid_thw")
    )
    kwargs["position_ids"] = positions
    return kwargs, positions.amax(dim=(0, 2)).unsqueeze(-1) + 1


def text_responses(input_ids: torch.Tensor, response_length: int, hf_config: Any) -> torch.Tensor:
    """``input_ids`` with the image/video placeholder tokens that a rollout sampled into the last
    ``response_length`` columns replaced by the pad token (or 0): the model would otherwise look for images
    for them. Only the later tokens' context changes (they saw the placeholder's embedding when sampled)."""
    placeholders = (hf_config.image_token_id, hf_config.video_token_id)
    responses = input_ids[:, input_ids.shape[1] - response_length :]
    sampled = torch.isin(responses, torch.tensor(placeholders, device=input_ids.device))
    if not bool(sampled.any()):
        return input_ids
    pad = getattr(hf_config.get_text_config(), "pad_token_id", None) or 0
    cleaned = input_ids.clone()
    cleaned[:, input_ids.shape[1] - response_length :] = responses.masked_fill(sampled, pad)
    return cleaned


def vision_language_kwargs(model: nn.Module, batch: Batch, packed: PackedBatch | None) -> dict[str, Any]:
    """Extra forward keyword arguments of ``batch`` for a vision-language ``model`` (empty for a text
    model): the concatenated ``pixel_values``/``image_grid_thw`` (and ``pixel_values_videos``/``video_grid_thw``), the mrope ``position_ids`` and the
    ``input_ids`` (:func:`text_responses`) of the padded batch, or of its ``packed`` row (see the module
    docstring; the row's end padding gets text positions 0, 1, 2, ... on every mrope axis)."""
    owner = rope_owner(model)
    if owner is None:
        return {}
    mask = batch["attention_mask"]
    input_ids = text_responses(batch["input_ids"], batch["responses"].shape[1], owner.config)
    kwargs: dict[str, Any] = multimodal_tensors(batch, input_ids.device)
    positions = mrope_positions(owner, input_ids, mask, kwargs.get("image_grid_thw"), kwargs.get("video_grid_thw"))
    if packed is None:
        kwargs["input_ids"], kwargs["position_ids"] = input_ids, positions
    else:
        tail = torch.arange(packed.padding, dtype=positions.dtype, device=positions.device)
        mrope = torch.cat([positions[:, mask.bool()], tail.expand(positions.shape[0], -1)], dim=1).unsqueeze(1)
        kwargs["input_ids"] = torch.cat([input_ids[mask.bool()], input_ids.new_zeros(packed.padding)]).unsqueeze(0)
        kwargs["position_ids"] = torch.cat([packed.position_ids.unsqueeze(0).to(mrope.dtype), mrope])
    return kwargs
