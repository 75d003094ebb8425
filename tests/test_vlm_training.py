"""Training a tiny Qwen2-VL with rlcore's shared HF model code and the FSDP engine: images and mrope positions
in the padded and packed forwards, ``freeze_vision_tower``, LoRA, and the HF rollout with images."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from rlcore_testkit.attention import AttentionProbe
from rlcore_testkit.contracts.backend import TrainingBackendContract
from rlcore_testkit.tiny_vlm import build_tiny_vlm, vl_prompt_batch

from rlcore.api.batch import Batch
from rlcore.errors import RLCoreError
from rlcore.modelkit.hf_models import response_outputs
from rlcore.modelkit.packed_attention import ATTENTION_NAME
from rlcore.modelkit.vlm import token_types
from rlcore.processors import load_processor

RED, BLUE = Image.new("RGB", (56, 56), (220, 30, 30)), Image.new("RGB", (84, 56), (30, 30, 220))
ROWS = [
    ("how many red", [RED]),
    ("compare the two", [BLUE, RED]),
    ("what is 2 + 3", []),
    ("how many blue", [BLUE]),
]


@pytest.fixture(scope="module")
def vlm_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny Qwen2-VL and Qwen2.5-VL directories."""
    root = tmp_path_factory.mktemp("vlm")
    return {arch: build_tiny_vlm(root / arch, arch=arch) for arch in ("qwen2_vl", "qwen2_5_vl")}


def training_batch(processor: Any, rows: list = ROWS, response_length: int = 5, seed: int = 0) -> Batch:
    """The prompts of ``rows`` with random right-padded text responses (as a rollout returns them)."""
    prompts = vl_prompt_batch(processor, rows)
    generator = torch.Generator().manual_seed(seed)
    count = len(rows)
    responses = torch.randint(4, 300, (count, response_length), generator=generator)
    lengths = torch.tensor([response_length - (i % 3) for i in range(count)])
    response_mask = (torch.arange(response_length)[None, :] < lengths[:, None]).long()
    responses = torch.where(response_mask.bool(), responses, processor.tokenizer.pad_token_id)
    mask = torch.cat([prompts["attention_mask"], response_mask], -1)
    tensors = {
        "prompts": prompts["input_ids"],
        "responses": responses,
        "response_mask": response_mask,
        "input_ids": torch.cat([prompts["input_ids"], responses], -1),
        "attention_mask": mask,
        "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
    }
    return Batch(tensors, dict(prompts.non_tensors))


def hf_reference_log_probs(model: Any, batch: Batch) -> torch.Tensor:
    """Response log-probs from transformers' own multimodal forward (its mrope from ``mm_token_type_ids``)."""
    images = [entry for entry in batch.non_tensors["multi_modal_inputs"] if entry is not None]
    logits = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        pixel_values=torch.cat([entry["pixel_values"] for entry in images]),
        image_grid_thw=torch.cat([entry["image_grid_thw"] for entry in images]),
        mm_token_type_ids=token_types(batch["input_ids"], model.config),
    ).logits
    length = batch["responses"].shape[1]
    logits = logits[:, -length - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl"])
def test_packed_and_padded_log_probs_agree_for_image_batches(vlm_dirs: dict[str, Path], arch: str) -> None:
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(vlm_dirs[arch], dtype=torch.float32).eval()
    batch = training_batch(load_processor(vlm_dirs[arch]))
    mask = batch["response_mask"].bool()
    with torch.no_grad():
        padded = response_outputs(model, batch, 1.0, with_entropy=True)
        with AttentionProbe() as probe:
            packed = response_outputs(model, batch, 1.0, with_entropy=True, remove_padding=True)
        # pad_to_length: the row's end padding (text positions on every mrope axis) changes nothing
        bucketed = response_outputs(model, batch, 1.0, with_entropy=True, remove_padding=True, pad_multiple=64)
        reference = hf_reference_log_probs(model, batch)
        blank = batch.index(slice(None))
        blank.non_tensors["multi_modal_inputs"] = [
            None if entry is None else {**entry, "pixel_values": torch.zeros_like(entry["pixel_values"])}
            for entry in batch.non_tensors["multi_modal_inputs"]
        ]
        without_images = response_outputs(model, blank, 1.0, with_entropy=False)
    torch.testing.assert_close(packed.log_probs[mask], padded.log_probs[mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(packed.entropy[mask], padded.entropy[mask], atol=1e-5, rtol=0)
    assert int(batch["attention_mask"].sum()) % 64, "the bucket must pad this batch"
    torch.testing.assert_close(bucketed.log_probs[mask], packed.log_probs[mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(padded.log_probs[mask], reference[mask], atol=1e-5, rtol=0)
    # the packed row's text attention is causal per sequence: no [nnz, nnz] mask, and the model was switched
    assert not probe.squares(int(batch["attention_mask"].sum()))
    assert any(call.causal and not call.masked for call in probe.calls)
    assert model.config.get_text_config()._attn_implementation == ATTENTION_NAME
    # the pixels reach the model: other pixels, other log-probs on the rows with images (not on the text row)
    change = (without_images.log_probs - padded.log_probs).abs().amax(-1)
    assert change[[0, 1, 3]].min() > 1e-4 and change[2] < 1e-5


def test_token_budget_micro_batches_carry_each_rows_images(vlm_dirs: dict[str, Path]) -> None:
    """Dynamic batch sizes regroup rows; each micro-batch brings its rows' images, so the restored log-probs
    equal the whole batch's."""
    from transformers import AutoModelForImageTextToText

    from rlcore.workers.micro_batches import plan_micro_batches

    model = AutoModelForImageTextToText.from_pretrained(vlm_dirs["qwen2_vl"], dtype=torch.float32).eval()
    batch = training_batch(load_processor(vlm_dirs["qwen2_vl"]))
    budget = int(batch["attention_mask"].sum(-1).max()) + 1
    plan = plan_micro_batches(batch, budget=budget, budget_key="ppo_max_token_len_per_gpu", device=torch.device("cpu"))
    assert len(plan.parts) > 1 and plan.order is not None
    with torch.no_grad():
        whole = response_outputs(model, batch, 1.0, with_entropy=False, remove_padding=True).log_probs
        parts = [
            response_outputs(model, part, 1.0, with_entropy=False, remove_padding=True).log_probs for part in plan.parts
        ]
    mask = batch["response_mask"].bool()
    torch.testing.assert_close(plan.restore(parts)[mask], whole[mask], atol=1e-5, rtol=0)


def test_rows_whose_images_do_not_match_their_tokens_are_an_error(vlm_dirs: dict[str, Path]) -> None:
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(vlm_dirs["qwen2_vl"], dtype=torch.float32)
    batch = training_batch(load_processor(vlm_dirs["qwen2_vl"]))
    batch.non_tensors["multi_modal_inputs"][1] = None
    with pytest.raises(
        RLCoreError, match=r"hold 20 image tokens but their multi_modal_inputs \(image_grid_thw\) describe 10"
    ):
        response_outputs(model, batch, 1.0, with_entropy=False, remove_padding=True)
    batch.non_tensors["multi_modal_inputs"][1] = {"pixel_values": torch.zeros(4, 4)}
    with pytest.raises(RLCoreError, match=r"multi_modal_inputs\[1\] must map pixel_values and image_grid_thw"):
        response_outputs(model, batch, 1.0, with_entropy=False)


def test_placeholder_tokens_sampled_into_a_response_are_text(vlm_dirs: dict[str, Path]) -> None:
    """A rollout may sample ``<|image_pad|>``; the forward must not look for an image for it, and its own
    log-prob is still computed (packed and padded alike)."""
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(vlm_dirs["qwen2_vl"], dtype=torch.float32).eval()
    processor = load_processor(vlm_dirs["qwen2_vl"])
    batch = training_batch(processor)
    prompt_length = batch["prompts"].shape[1]
    batch["responses"][0, 1] = processor.image_token_id
    batch["input_ids"][0, prompt_length + 1] = processor.image_token_id
    mask = batch["response_mask"].bool()
    with torch.no_grad():
        padded = response_outputs(model, batch, 1.0, with_entropy=False).log_probs
        packed = response_outputs(model, batch, 1.0, with_entropy=False, remove_padding=True).log_probs
    torch.testing.assert_close(packed[mask], padded[mask], atol=1e-5, rtol=0)
    assert torch.isfinite(padded).all() and padded[0, 1] < 0


class VLMSettings(TrainingBackendContract):
    """The backend contract's small settings for the FSDP engine, with room for image prompts."""

    component_name = "fsdp"
    config_overrides = {
        "data.max_prompt_length": 48,
        "data.max_response_length": 5,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "actor_rollout_ref.model.use_remove_padding": True,
        "actor_rollout_ref.actor.optim.lr": 1e-2,
    }


def named_params(worker: Any) -> dict[str, torch.Tensor]:
    """The actor's parameters (Hugging Face names, LoRA merged) as CPU copies."""
    return {name: tensor.detach().clone() for name, tensor in worker.full_state_dict().items()}


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_fsdp_worker_trains_vlm_and_rollout_matches(vlm_dirs: dict[str, Path], lora: bool) -> None:
    """One update through the FSDP engine with ``freeze_vision_tower`` (and LoRA): the language model moves,
    the vision tower does not; the weight sync passes the checksum; the HF rollout samples with the images
    and its log-probs equal the trainer's for the sampled responses."""
    extra = {"actor_rollout_ref.actor.freeze_vision_tower": True}
    if lora:
        extra |= {"actor_rollout_ref.model.lora_rank": 4, "actor_rollout_ref.model.lora_alpha": 8}
    worker = VLMSettings.make_actor(vlm_dirs["qwen2_vl"], "actor_rollout", **extra)
    try:
        processor = load_processor(vlm_dirs["qwen2_vl"])
        batch = training_batch(processor)
        before = named_params(worker)
        batch["old_log_probs"] = worker.compute_log_prob(batch)["old_log_probs"]
        batch["advantages"] = torch.ones_like(batch["old_log_probs"])
        worker.update_actor(batch)
        after = named_params(worker)
        moved = {name for name in before if not torch.equal(before[name], after[name])}
        assert moved and all(not name.startswith("model.visual.") for name in moved)
        assert any(name.startswith("model.language_model.layers.") for name in moved)
        assert worker.sync_weights()["rollout/weight_checksum_diff"] <= 1e-6  # every weight, the vision tower's too
        assert worker._check_log_prob_parity(worker.actor, worker.rollout_engine) <= 1e-5  # the engines' probe

        prompts = vl_prompt_batch(processor, ROWS)
        out = worker.generate_sequences(prompts)
        assert out["responses"].shape == (4, 5)
        out["response_mask"] = out["response_mask"].long()
        trainer = worker.compute_log_prob(out)["old_log_probs"]
        mask = out["response_mask"].bool()
        torch.testing.assert_close(out["rollout_log_probs"][mask], trainer[mask], atol=1e-4, rtol=0)
    finally:
        VLMSettings.close(worker)


def test_freeze_vision_tower_needs_a_vision_model(tiny_model_dir: Path) -> None:
    with pytest.raises(RLCoreError, match="freeze_vision_tower=true but the model has no vision tower"):
        VLMSettings.make_actor(tiny_model_dir, "actor", **{"actor_rollout_ref.actor.freeze_vision_tower": True})
