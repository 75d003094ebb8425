"""Video inputs for Qwen2-VL-style models (``data.video_key``): the torchvision-free video patching, the dataset's
video rows (lists of frames, a local video file), and a tiny Qwen2-VL that samples on the HF engine and trains
on the FSDP engine with videos, the rollout's log-probs equal to the trainer's.

Every video is made here from random frames (OpenCV writes the video file); nothing is downloaded.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from rlcore_testkit.contracts.backend import TrainingBackendContract
from rlcore_testkit.runs import REWARD_PY, tiny_run
from rlcore_testkit.tiny_vlm import build_tiny_vlm

from rlcore.api import Batch
from rlcore.data import DataError
from rlcore.data.multimodal import MULTI_MODAL_DATA, MULTI_MODAL_INPUTS
from rlcore.data.rl_dataset import RLDataset
from rlcore.processors import frames_video_inputs, load_processor

WIDTH, HEIGHT = 84, 56


def frames(count: int, seed: int = 0) -> list[Image.Image]:
    """``count`` random RGB frames of 84x56."""
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 255, (HEIGHT, WIDTH, 3), dtype=np.uint8)) for _ in range(count)]


def write_video(path: Path, count: int, seed: int = 0) -> Path:
    """A Motion-JPEG ``.avi`` of ``count`` random frames, written with OpenCV."""
    import cv2

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 4, (WIDTH, HEIGHT))
    for frame in frames(count, seed):
        writer.write(cv2.cvtColor(np.asarray(frame), cv2.COLOR_RGB2BGR))
    writer.release()
    return path


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2-VL and its processor, written once."""
    return build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "qwen2_vl")


def video_row(i: int, video: Any, split: str = "train") -> dict[str, Any]:
    """A row of the tiny digits task whose prompt shows ``video``."""
    return {
        "data_source": "tiny/digits",
        "prompt": [{"role": "user", "content": f"<video>count {i}"}],
        "videos": [video],
        "reward_model": {"style": "rule", "ground_truth": str(i)},
        "extra_info": {"split": split, "index": i},
    }


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def frame_files(root: Path, count: int, seed: int) -> list[str]:
    """``count`` random frames saved as PNG files under ``root``; their paths."""
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for j, frame in enumerate(frames(count, seed)):
        frame.save(root / f"{seed}_{j}.png")
        paths.append(str(root / f"{seed}_{j}.png"))
    return paths


def test_video_patches_are_qwen2_vl_patches_of_grouped_frames(vlm_dir: Path) -> None:
    """Two equal frames give exactly the image patches of that frame (Qwen2-VL repeats an image over the
    temporal patch); three frames give two temporal groups, the last one's frame repeated, each patch holding
    its group's frames in order."""
    image_processor = load_processor(vlm_dir).image_processor
    first, second, third = frames(3)
    image = image_processor(images=[first], return_tensors="np")
    same = frames_video_inputs(image_processor, [[first, first]])
    np.testing.assert_array_equal(same["pixel_values_videos"], image["pixel_values"])
    assert same["video_grid_thw"].tolist() == [[1, *image["image_grid_thw"][0][1:].tolist()]]

    video = frames_video_inputs(image_processor, [[first, second, third]])
    spatial = image["pixel_values"].shape[0]
    assert video["video_grid_thw"].tolist() == [[2, *image["image_grid_thw"][0][1:].tolist()]]
    patches = video["pixel_values_videos"].reshape(2, spatial, 3, 2, 14, 14)
    for group, (left, right) in enumerate([(first, second), (third, third)]):
        for slot, frame in enumerate((left, right)):
            alone = image_processor(images=[frame], return_tensors="np")["pixel_values"]
            np.testing.assert_array_equal(patches[group, :, :, slot], alone.reshape(spatial, 3, 2, 14, 14)[:, :, 0])
    with pytest.raises(ValueError, match="video 0: its frames differ in size"):
        frames_video_inputs(image_processor, [[first, first.resize((56, 56))]])


def test_the_dataset_renders_video_rows_from_frames_and_files(vlm_dir: Path, tmp_path: Path) -> None:
    """A row of frame files and a row of a video file each get their video tokens, ``pixel_values_videos`` and
    ``video_grid_thw``, and their frames in ``multi_modal_data``; a text row gets None."""
    rows = [
        video_row(0, frame_files(tmp_path / "frames", 2, seed=1)),
        video_row(1, "clip.avi"),  # relative to the data file's folder
        {**video_row(2, None), "prompt": [{"role": "user", "content": "count 2"}], "videos": None},
    ]
    write_video(tmp_path / "clip.avi", 3, seed=2)
    processor = load_processor(vlm_dir)
    dataset = RLDataset(
        write_jsonl(tmp_path / "train.jsonl", rows),
        processor.tokenizer,
        {"max_prompt_length": 64},
        processor=processor,
    )
    video_token = processor.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    for i, frame_count in ((0, 2), (1, 3)):
        item = dataset[i]
        inputs = item[MULTI_MODAL_INPUTS]
        grid = inputs["video_grid_thw"]
        assert grid.tolist() == [[math.ceil(frame_count / 2), 4, 6]]
        assert inputs["pixel_values_videos"].shape == (int(grid.prod()), 3 * 2 * 14 * 14)
        assert int((item["input_ids"] == video_token).sum()) == int(grid.prod()) // 4
        assert len(item[MULTI_MODAL_DATA]["video"][0]) == frame_count and "image" not in item[MULTI_MODAL_DATA]
    assert dataset[2][MULTI_MODAL_INPUTS] is None


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"videos": []}, r"the prompt has 1 <video> placeholder\(s\) but key 'videos' holds 0 video\(s\)"),
        ({"videos": ["missing.avi"]}, r"key 'videos'\[0\]: video file .*missing.avi does not exist"),
        ({"videos": "clip.avi"}, r"key 'videos' \(data.video_key\) must be a list of videos"),
        ({"videos": [[]]}, r"key 'videos'\[0\]: the video has no frames"),
    ],
    ids=["placeholders", "missing-file", "not-a-list", "no-frames"],
)
def test_bad_video_rows_name_the_row_and_key(vlm_dir: Path, tmp_path: Path, row: dict, message: str) -> None:
    processor = load_processor(vlm_dir)
    path = write_jsonl(tmp_path / "bad.jsonl", [{**video_row(0, None), **row}])
    with pytest.raises(DataError, match=rf"bad.jsonl.*{message}"):
        RLDataset(path, processor.tokenizer, {"max_prompt_length": 64}, processor=processor)[0]


class VideoSettings(TrainingBackendContract):
    """The backend contract's small settings for the FSDP engine, with room for video prompts (not collected)."""

    component_name = "fsdp"
    config_overrides = {
        "data.max_prompt_length": 48,
        "data.max_response_length": 5,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "actor_rollout_ref.model.use_remove_padding": True,
    }


def video_prompt_batch(processor: Any, clips: list[list[Image.Image] | None]) -> Batch:
    """Left-padded prompts, one per entry of ``clips`` (a video's frames, or None for a text prompt), in the
    dataset's multimodal layout."""
    encoded, inputs, data = [], [], []
    for clip in clips:
        content = ([{"type": "video"}] if clip else []) + [{"type": "text", "text": "what moves"}]
        text = processor.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        )
        out = processor(text=[text], videos=[clip] if clip else None, return_tensors="pt")
        encoded.append(out["input_ids"][0])
        inputs.append({name: out[name] for name in ("pixel_values_videos", "video_grid_thw")} if clip else None)
        data.append({"video": [clip]} if clip else None)
    width = max(len(ids) for ids in encoded)
    input_ids = torch.full((len(clips), width), processor.tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(clips), width), dtype=torch.long)
    for row, ids in enumerate(encoded):
        input_ids[row, width - len(ids) :], mask[row, width - len(ids) :] = ids, 1
    return Batch(
        {"input_ids": input_ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)},
        {MULTI_MODAL_DATA: data, MULTI_MODAL_INPUTS: inputs},
    )


def test_fsdp_worker_trains_on_videos_and_the_rollout_matches(vlm_dir: Path) -> None:
    """The HF rollout samples with videos (rows of 2 and 3 frames and a text row, one batch), the FSDP engine's
    log-probs of those responses equal the rollout's (1e-4), and an update on them moves the weights."""
    worker = VideoSettings.make_actor(vlm_dir, "actor_rollout")
    try:
        processor = load_processor(vlm_dir)
        out = worker.generate_sequences(video_prompt_batch(processor, [frames(2, 1), frames(3, 2), None]))
        out["response_mask"] = out["response_mask"].long()
        trainer = worker.compute_log_prob(out)["old_log_probs"]
        mask = out["response_mask"].bool()
        torch.testing.assert_close(out["rollout_log_probs"][mask], trainer[mask], atol=1e-4, rtol=0)
        before = {name: tensor.clone() for name, tensor in worker.full_state_dict().items()}
        out["old_log_probs"] = trainer
        out["advantages"] = torch.linspace(-1.0, 1.0, trainer.numel()).reshape(trainer.shape)
        worker.update_actor(out)
        after = worker.full_state_dict()
        assert any(not torch.equal(before[name], after[name]) for name in before)
    finally:
        VideoSettings.close(worker)


def test_a_video_run_trains(vlm_dir: Path, tmp_path: Path) -> None:
    """Two GRPO steps on video rows (frames on disk, a video file in every other row): the HF rollout samples
    with the videos and the FSDP actor trains. The run's rollout/trainer mismatch is that of image rows: a tiny
    VLM's run has ~2-4e-4 in probability for image, video and even text rows (a text model's: ~3e-9), so it is
    bounded here, and the exact agreement is the test above."""
    videos = tmp_path / "videos"
    videos.mkdir()
    rows = []
    for i in range(8):
        video = str(write_video(videos / f"{i}.avi", 2, seed=i)) if i % 2 else frame_files(videos, 2, seed=i)
        rows.append(video_row(i, video))
    task = {
        "train": write_jsonl(tmp_path / "train.jsonl", rows),
        "test": write_jsonl(tmp_path / "test.jsonl", rows[:2]),
        "reward": tmp_path / "reward.py",
    }
    task["reward"].write_text(REWARD_PY)
    last, run_dir = tiny_run(
        tmp_path,
        vlm_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "data.max_prompt_length=64",
        "data.video_key=videos",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
    )
    rows_logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows_logged if "actor/pg_loss" in row]
    assert len(steps) == 2 and all(math.isfinite(row["actor/pg_loss"]) for row in steps)
    for row in steps:
        assert row["training/rollout_probs_diff_max"] < 1e-3, row["training/rollout_probs_diff_max"]
    assert last["training/global_step"] == 2


def test_rollout_engine_log_probs_match_a_teacher_forced_video_forward(vlm_dir: Path) -> None:
    """The HF engine's sampled log-probs with a video prompt equal transformers' own forward of the sequences
    (the trainer's view: a sampled placeholder token is text, so positions after one are left out), and other
    frames give other log-probs."""
    from rlcore_plugin_hf.engine import HFRolloutEngine
    from transformers import AutoModelForImageTextToText

    from rlcore.api import Batch, RolloutConfig, default_section
    from rlcore.modelkit.vlm import text_responses, token_types

    processor = load_processor(vlm_dir)
    content = [{"type": "video"}, {"type": "text", "text": "what moves"}]
    text = processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )
    encoded = processor(text=[text], videos=[frames(4)], return_tensors="pt")
    inputs = {name: encoded[name] for name in ("pixel_values_videos", "video_grid_thw")}
    mask = encoded["attention_mask"]
    batch = Batch(
        {"input_ids": encoded["input_ids"], "attention_mask": mask, "position_ids": mask.cumsum(-1) - 1},
        {MULTI_MODAL_INPUTS: [inputs]},
    )
    config = default_section(RolloutConfig, response_length=6, calculate_log_probs=True)
    engine = HFRolloutEngine(str(vlm_dir), processor.tokenizer, config, dtype=torch.float32)
    out = engine.generate(batch)
    model = AutoModelForImageTextToText.from_pretrained(vlm_dir, dtype=torch.float32).eval()
    length = out["responses"].shape[1]
    input_ids = text_responses(out["input_ids"], length, model.config)
    with torch.no_grad():
        logits = model(
            input_ids=input_ids,
            attention_mask=out["attention_mask"],
            mm_token_type_ids=token_types(input_ids, model.config),
            **inputs,
        ).logits.float()
    expected = torch.log_softmax(logits[:, -length - 1 : -1], -1).gather(-1, out["responses"][..., None]).squeeze(-1)
    placeholder = torch.isin(out["responses"], torch.tensor([model.config.image_token_id, model.config.video_token_id]))
    clean = ((placeholder.long().cumsum(dim=1) - placeholder.long()) == 0) & out["response_mask"].bool()
    assert int(clean.sum()) >= 3
    torch.testing.assert_close(out["rollout_log_probs"][clean], expected[clean], atol=1e-4, rtol=0)
    other = processor(text=[text], videos=[frames(4, seed=9)], return_tensors="pt")
    batch.non_tensors[MULTI_MODAL_INPUTS] = [{name: other[name] for name in inputs}]
    assert not torch.equal(engine.generate(batch)["rollout_log_probs"], out["rollout_log_probs"])


def test_the_dry_run_describes_videos(vlm_dir: Path, tmp_path: Path) -> None:
    """A data file with a video column gets the plan's ``videos:`` line, naming how frames are patched."""
    from rlcore_testkit.runs import dry_run

    train = write_jsonl(tmp_path / "train.jsonl", [video_row(0, frame_files(tmp_path / "frames", 2, seed=0))])
    result = dry_run(f"data.train_files={train}", f"actor_rollout_ref.model.path={vlm_dir}")
    assert result.exit_code == 0, result.output
    assert "videos: <video> placeholders in the prompts are filled from data.video_key by" in result.output
    assert "images: <image>" not in result.output
