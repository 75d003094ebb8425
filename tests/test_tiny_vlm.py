"""The tiny Qwen2-VL / Qwen2.5-VL built from config: saves, loads with the Auto classes and rlcore's processor
loader, and its processor expands an image into the expected number of ``<|image_pad|>`` tokens."""

from __future__ import annotations

import pytest
import torch
from PIL import Image
from rlcore_testkit.tiny_vlm import DEFAULT_MAX_PIXELS, build_tiny_vlm, build_vl_model, build_vl_tokenizer

from rlcore.errors import RLCoreError
from rlcore.processors import load_processor

MESSAGES = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "how many red"}]}]


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl"])
def test_tiny_vlm_saves_loads_and_expands_images(tmp_path, arch):
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    directory = build_tiny_vlm(tmp_path / arch, arch=arch)
    model = AutoModelForImageTextToText.from_pretrained(directory)
    assert model.config.model_type == arch
    text_config = model.config.text_config
    assert text_config.hidden_size // text_config.num_attention_heads >= 32
    processor = load_processor(directory)
    assert type(processor.image_processor).__name__ == "Qwen2VLImageProcessorPil"
    assert AutoTokenizer.from_pretrained(directory).convert_tokens_to_ids("<|image_pad|>") == processor.image_token_id

    text = processor.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>how many red<|im_end|>\n<|im_start|>assistant\n"
    )
    # 56x56 px = 4x4 patches of 14 px, merged 2x2 -> 4 image tokens; 112x56 -> 8x4 patches -> 8 tokens
    small, wide = Image.new("RGB", (56, 56), "red"), Image.new("RGB", (112, 56), "blue")
    out = processor(text=[text, text], images=[small, wide], return_tensors="pt", padding=True)
    assert out["image_grid_thw"].tolist() == [[1, 4, 4], [1, 4, 8]]
    assert (out["input_ids"] == processor.image_token_id).sum(dim=1).tolist() == [4, 8]
    assert out["pixel_values"].shape == (16 + 32, 3 * 2 * 14 * 14)
    # a big image is shrunk to at most max_pixels
    big = processor(text=[text], images=[Image.new("RGB", (640, 480))], return_tensors="pt")
    assert int(big["image_grid_thw"].prod()) * 14 * 14 <= DEFAULT_MAX_PIXELS

    with torch.no_grad():
        logits = model(**out).logits
    assert logits.shape[:2] == out["input_ids"].shape and torch.isfinite(logits).all()
    # videos need no torchvision (rlcore.processors.frames_video_inputs), but each needs its placeholder
    with pytest.raises(ValueError, match=r"fewer <\|video_pad\|> placeholders than videos"):
        processor(text=[text], videos=[[small, small]])


def test_load_processor_text_only_model_and_bad_arch(tmp_path):
    from rlcore_testkit.tiny import make_tiny_model_dir

    assert load_processor(make_tiny_model_dir(tmp_path / "text")) is None
    with pytest.raises(ValueError, match="arch must be one of"):
        build_vl_model(build_vl_tokenizer(), arch="llava")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "processor_config.json").write_text('{"processor_class": "NoSuchProcessor"}')
    with pytest.raises(RLCoreError, match="broken: cannot load the model's processor"):
        load_processor(broken)


def test_load_processor_resolves_a_hub_name_and_names_it_when_it_cannot(monkeypatch, tmp_path):
    """A model given by name (not a local folder) is looked up like its tokenizer; offline and uncached, the
    error names the model instead of treating it as a text-only model."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    with pytest.raises(RLCoreError, match="no-such-org/no-such-vlm: cannot read the model's config"):
        load_processor("no-such-org/no-such-vlm")
