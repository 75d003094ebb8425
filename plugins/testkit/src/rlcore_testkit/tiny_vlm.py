"""Build a tiny Qwen2-VL / Qwen2.5-VL model and its processor from config; nothing is downloaded.

The tokenizer is :func:`rlcore_testkit.tiny.build_tokenizer`'s byte-level BPE plus Qwen2-VL's vision special
tokens; the chat template renders list-of-parts content (``{"type": "image"}`` / ``{"type": "text"}``) the way
Qwen2-VL's does, without its default system prompt. The image processor is the slow (PIL/numpy)
``Qwen2VLImageProcessorPil`` with small ``min_pixels``/``max_pixels`` so that an image is a handful of patches
(no torchvision needed). Text and vision heads are 32 wide because vLLM's CPU attention rejects smaller ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rlcore_testkit.tiny import padded_vocab_size

VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
PATCH_SIZE = 14
MERGE_SIZE = 2
#: One merged token covers a 28x28 pixel square; the defaults allow 4..16 such tokens per image.
DEFAULT_MIN_PIXELS = 4 * (PATCH_SIZE * MERGE_SIZE) ** 2
DEFAULT_MAX_PIXELS = 16 * (PATCH_SIZE * MERGE_SIZE) ** 2
VL_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part or 'image_url' in part %}"
    "{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif part['type'] == 'video' or 'video' in part %}"
    "{{ '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{% elif 'text' in part %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
ARCHES = ("qwen2_vl", "qwen2_5_vl")


def build_vl_tokenizer(corpus: Iterable[str] | None = None, vocab_size: int = 512):
    """The tiny BPE tokenizer with Qwen2-VL's vision special tokens and the list-of-parts chat template."""
    from rlcore_testkit.tiny import build_tokenizer

    tokenizer = build_tokenizer(corpus, vocab_size=vocab_size)
    tokenizer.add_special_tokens({"additional_special_tokens": VISION_TOKENS}, replace_extra_special_tokens=False)
    tokenizer.chat_template = VL_CHAT_TEMPLATE
    return tokenizer


def build_processor(tokenizer, *, min_pixels: int = DEFAULT_MIN_PIXELS, max_pixels: int = DEFAULT_MAX_PIXELS):
    """A Qwen2-VL processor over ``tokenizer`` with the slow image processor and no video processor."""
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    from rlcore.api import build_image_only_processor

    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=min_pixels, max_pixels=max_pixels, patch_size=PATCH_SIZE, merge_size=MERGE_SIZE
    )
    return build_image_only_processor(image_processor, tokenizer, VL_CHAT_TEMPLATE)


def build_vl_model(
    tokenizer,
    *,
    arch: str = "qwen2_vl",
    hidden_size: int = 64,
    intermediate_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    vision_depth: int = 1,
    vision_embed_dim: int = 64,
    vision_num_heads: int = 2,
    tie_word_embeddings: bool = True,
    max_position_embeddings: int = 2048,
    seed: int = 0,
):
    """A randomly initialised ``Qwen2VLForConditionalGeneration`` (or the Qwen2.5-VL one) sized for
    ``tokenizer`` (vocab rounded up to 64). The mrope sections split the 32-wide head's 16 frequencies."""
    import torch
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
    )

    if arch not in ARCHES:
        raise ValueError(f"build_vl_model: arch must be one of {ARCHES}, got {arch!r}")
    head_dim = hidden_size // num_heads
    half = head_dim // 2
    mrope_section = [half - 2 * (half * 3 // 8), half * 3 // 8, half * 3 // 8]
    ids = {name: tokenizer.convert_tokens_to_ids(name) for name in VISION_TOKENS}
    text_config = dict(
        vocab_size=padded_vocab_size(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": mrope_section},
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=tie_word_embeddings,
    )
    config_cls: type[Qwen2VLConfig | Qwen2_5_VLConfig]
    model_cls: type[Qwen2VLForConditionalGeneration | Qwen2_5_VLForConditionalGeneration]
    if arch == "qwen2_vl":
        vision_config: dict = dict(
            depth=vision_depth,
            embed_dim=vision_embed_dim,
            hidden_size=hidden_size,
            num_heads=vision_num_heads,
            mlp_ratio=2,
            patch_size=PATCH_SIZE,
            spatial_merge_size=MERGE_SIZE,
        )
        config_cls, model_cls = Qwen2VLConfig, Qwen2VLForConditionalGeneration
    else:
        vision_config = dict(
            depth=vision_depth,
            hidden_size=vision_embed_dim,
            intermediate_size=2 * vision_embed_dim,
            num_heads=vision_num_heads,
            out_hidden_size=hidden_size,
            patch_size=PATCH_SIZE,
            spatial_merge_size=MERGE_SIZE,
            window_size=PATCH_SIZE * MERGE_SIZE * 2,
            fullatt_block_indexes=[vision_depth - 1],
        )
        config_cls, model_cls = Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    config = config_cls(
        text_config=text_config,
        vision_config=vision_config,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=tie_word_embeddings,
    )
    torch.manual_seed(seed)
    model = model_cls(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def build_tiny_vlm(
    directory: str | Path,
    *,
    arch: str = "qwen2_vl",
    corpus: Iterable[str] | None = None,
    min_pixels: int = DEFAULT_MIN_PIXELS,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    seed: int = 0,
    **model_kwargs,
) -> Path:
    """Write a tiny VLM + processor to ``directory``; loadable with ``AutoModelForImageTextToText``,
    ``AutoTokenizer`` and :func:`rlcore.processors.load_processor` (``AutoProcessor`` where torchvision is
    installed). ``model_kwargs`` go to :func:`build_vl_model`."""
    directory = Path(directory)
    tokenizer = build_vl_tokenizer(corpus)
    processor = build_processor(tokenizer, min_pixels=min_pixels, max_pixels=max_pixels)
    model = build_vl_model(tokenizer, arch=arch, seed=seed, **model_kwargs)
    return save_vlm(model, processor, directory)


def save_vlm(model, processor, directory: str | Path) -> Path:
    """Save ``model`` and ``processor`` to ``directory``, recording transformers' own processor class
    (``Qwen2VLProcessor``) so that ``AutoProcessor`` (with torchvision) and vLLM load it as a regular one."""
    import json

    directory = Path(directory)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    for name in ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        file = directory / name
        if file.is_file():
            data = json.loads(file.read_text())
            if "processor_class" in data:
                data["processor_class"] = "Qwen2VLProcessor"
                file.write_text(json.dumps(data, indent=2) + "\n")
    return directory


def vl_prompt_batch(processor, rows: Sequence[tuple[str, Sequence[Any]]]):
    """A left-padded prompt Batch in the dataset's multimodal layout, built with ``processor``.

    ``rows`` are ``(text, images)``: the user turn shows each image (in order) before ``text``. Holds
    ``input_ids``, ``attention_mask``, ``position_ids`` (``cumsum(attention_mask) − 1``) and per row
    ``non_tensors["multi_modal_data"]`` (``{"image": [PIL images]}``) and
    ``non_tensors["multi_modal_inputs"]`` (``pixel_values``, ``image_grid_thw``); a row without images has
    None in both.
    """
    import torch

    from rlcore.api import Batch

    encoded, data, inputs = [], [], []
    for text, images in rows:
        content = [*({"type": "image"} for _ in images), {"type": "text", "text": text}]
        rendered = processor.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        )
        out = processor(text=[rendered], images=list(images) or None, return_tensors="pt")
        encoded.append(out["input_ids"][0])
        data.append({"image": list(images)} if images else None)
        inputs.append(
            {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]} if images else None
        )
    width = max(len(ids) for ids in encoded)
    pad = processor.tokenizer.pad_token_id
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for row, ids in enumerate(encoded):
        input_ids[row, width - len(ids) :] = ids
        mask[row, width - len(ids) :] = 1
    return Batch(
        {"input_ids": input_ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)},
        {"multi_modal_data": data, "multi_modal_inputs": inputs},
    )
