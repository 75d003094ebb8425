"""Rollouts with images: the HF engine samples from a tiny Qwen2-VL with the rows' images (also when it
decodes in chunks of rows), and engines or models that cannot take images say so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from rlcore_plugin_hf.engine import HFRolloutEngine
from rlcore_testkit.tiny_vlm import build_tiny_vlm, vl_prompt_batch

from rlcore.api import RolloutConfig, default_section
from rlcore.api.batch import Batch
from rlcore.errors import RLCoreError
from rlcore.modelkit.hf_models import response_outputs
from rlcore.processors import load_processor

ROWS = [
    ("how many red", [Image.new("RGB", (56, 56), (220, 30, 30))]),
    ("what is 2 + 3", []),
    ("compare", [Image.new("RGB", (84, 56), (30, 30, 220)), Image.new("RGB", (56, 56), (30, 200, 30))]),
]


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2-VL directory."""
    return build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "qwen2_vl")


def rollout_config(**overrides: Any) -> Any:
    """The default rollout section: 6 response tokens, log-probs, ``overrides``."""
    return default_section(
        RolloutConfig, **{"response_length": 6, "calculate_log_probs": True, "ignore_eos": True, **overrides}
    )


def test_hf_engine_samples_with_images_in_chunks_and_matches_teacher_forcing(vlm_dir: Path) -> None:
    processor = load_processor(vlm_dir)
    prompts = vl_prompt_batch(processor, ROWS)
    whole = HFRolloutEngine(str(vlm_dir), processor.tokenizer, rollout_config())
    out = whole.generate(prompts)
    assert out["responses"].shape == (3, 6)
    assert out.non_tensors["multi_modal_inputs"][0] is prompts.non_tensors["multi_modal_inputs"][0]
    # one row per chunk: each chunk gets its own rows' images, and every row draws the same tokens
    width = prompts["input_ids"].shape[1] + 6
    chunked = HFRolloutEngine(str(vlm_dir), processor.tokenizer, rollout_config(max_num_batched_tokens=width))
    again = chunked.generate(prompts)
    assert torch.equal(again["responses"], out["responses"])
    # the sampled tokens' log-probs are the trainer's teacher-forced ones (mrope positions continue correctly),
    # up to a sampled image/video placeholder: the trainer sees the pad token in its place (text_responses)
    out["response_mask"] = out["response_mask"].long()
    with torch.no_grad():
        trainer = response_outputs(whole.module, out, 1.0, with_entropy=False).log_probs
    config = whole.module.config
    placeholder = torch.isin(out["responses"], torch.tensor([config.image_token_id, config.video_token_id]))
    clean = (placeholder.long().cumsum(dim=1) - placeholder.long()) == 0
    assert int(clean.sum()) >= 12
    torch.testing.assert_close(out["rollout_log_probs"][clean], trainer[clean], atol=1e-4, rtol=0)
    # the images matter: other pictures, other samples
    other = vl_prompt_batch(processor, [(text, [image.rotate(90) for image in images]) for text, images in ROWS])
    assert not torch.equal(whole.generate(other)["rollout_log_probs"], out["rollout_log_probs"])


def test_image_prompts_for_a_text_model_are_an_error(vlm_dir: Path, tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
    prompts = vl_prompt_batch(load_processor(vlm_dir), ROWS[:1])
    engine = HFRolloutEngine(str(tiny_model_dir), tiny_tokenizer, rollout_config())
    with pytest.raises(RLCoreError, match="carry images .* but the rollout model is not a vision-language model"):
        engine.generate(prompts)
    # text rows of a multimodal dataset (entries None) sample as if the field were absent
    rendered = tiny_tokenizer.apply_chat_template(
        [{"role": "user", "content": "1+2="}], add_generation_prompt=True, tokenize=False
    )
    text = tiny_tokenizer(rendered, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([text, text])
    plain = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "position_ids": torch.arange(len(text))[None].repeat(2, 1),
    }
    with_field = Batch(plain, {"multi_modal_inputs": [None, None]})
    first, second = (HFRolloutEngine(str(tiny_model_dir), tiny_tokenizer, rollout_config()) for _ in range(2))
    assert torch.equal(first.generate(with_field)["responses"], second.generate(Batch(plain))["responses"])


def test_token_list_engines_without_image_support_refuse_image_prompts(vlm_dir: Path) -> None:
    """The base class's ``_complete_multimodal`` names the engine instead of dropping the images."""
    from rlcore.rollout.token_engine import TokenListEngine

    class TextOnly(TokenListEngine):
        """A token-list engine that answers every prompt with token 1 and takes no images."""

        engine_name = "text-only"

        def _complete(self, prompts: list, params: Any, seeds: list, max_tokens: Any = None) -> list:
            return [([1], None) for _ in prompts]

        def _load_weights(self, state: dict) -> None:
            """Nothing to load."""

        def prompt_log_probs(self, token_ids: Any) -> Any:
            raise NotImplementedError

    processor = load_processor(vlm_dir)
    engine = TextOnly(str(vlm_dir), processor.tokenizer, rollout_config(prompt_length=48), dtype="float32")
    batch = vl_prompt_batch(processor, ROWS)
    with pytest.raises(RLCoreError, match="rollout.name=text-only: this rollout engine does not take image prompts"):
        engine.generate(batch)
    batch.non_tensors["multi_modal_data"][0] = None
    batch.non_tensors["multi_modal_data"][2] = None
    assert engine.generate(batch)["responses"].shape == (3, 6)
