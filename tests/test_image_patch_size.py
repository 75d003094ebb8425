"""verl's ``data.image_patch_size``: images and video frames resized the way ``qwen_vl_utils`` does before the
processor sees them (:mod:`rlcore.data.resize`), through the tiny VLM's real processor.

The expected sizes below were computed with ``qwen_vl_utils`` 0.0.14 (what verl calls); it is not a dependency
of rlcore, so they are written out here.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image
from rlcore_testkit.runs import dry_run
from rlcore_testkit.tiny_vlm import build_processor, build_tiny_vlm, build_vl_tokenizer

from rlcore.data import DataError
from rlcore.data.resize import listed_frames, resize_frames, resize_image, smart_resize
from rlcore.data.rl_dataset import RLDataset


@pytest.fixture(scope="module")
def processor():
    """The tiny VLM's processor: patch size 14, merge size 2, 3136..12544 pixels per image."""
    return build_processor(build_vl_tokenizer())


def noise(width: int, height: int, seed: int = 0) -> Image.Image:
    """A random RGB image."""
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8))


def png(image: Image.Image) -> bytes:
    """``image`` as PNG bytes."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def image_rows(path: Path, images: list) -> str:
    """A parquet file of one geo3k-style row per image entry."""
    rows = [
        {
            "data_source": "hiyouga/geometry3k",
            "prompt": [{"role": "user", "content": "<image> What is shown?"}],
            "images": [entry],
            "reward_model": {"style": "rule", "ground_truth": "1"},
            "extra_info": {"index": i},
        }
        for i, entry in enumerate(images)
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


@pytest.mark.parametrize(
    ("size", "factor", "bounds", "expected"),
    [
        ((60, 100), 32, (4 * 32**2, 16384 * 32**2), (64, 96)),  # rounded to the factor
        ((1080, 1920), 28, (3136, 12544), (84, 140)),  # shrunk under max_pixels, aspect kept
        ((10, 1000), 28, (3136, 12845056), (28, 1008)),  # a side never below the factor
        ((60, 100), 32, (50000, 16384 * 32**2), (192, 320)),  # grown over min_pixels
        ((2000, 3000), 32, (4096, 16384 * 32**2), (1984, 3008)),
    ],
)
def test_smart_resize_matches_qwen_vl_utils(size, factor, bounds, expected) -> None:
    assert smart_resize(*size, factor, *bounds) == expected


def test_smart_resize_rejects_what_it_cannot_size() -> None:
    with pytest.raises(DataError, match="aspect ratio must be below 200"):
        smart_resize(1, 500, 28, 3136, 12544)
    with pytest.raises(DataError, match="max_pixels .* smaller than its min_pixels"):
        smart_resize(56, 56, 28, 5000, 4000)
    with pytest.raises(DataError, match="cannot keep its aspect ratio within max_pixels=3136"):
        smart_resize(10, 1500, 28, 784, 3136)


def test_resize_image_takes_the_entry_s_own_bounds() -> None:
    image = noise(100, 60)
    assert resize_image(image, 32, "row").size == (96, 64)
    assert resize_image(image, 32, "row", {"min_pixels": 50000}).size == (320, 192)
    assert resize_image(image, 32, "row", {"resized_height": 200, "resized_width": 300}).size == (288, 192)
    with pytest.raises(DataError, match="rows.parquet row 3: min_pixels must be a positive number of pixels"):
        resize_image(image, 32, "rows.parquet row 3", {"min_pixels": -1})


def test_video_frames_take_verl_s_video_bounds() -> None:
    frames = [noise(84, 56, seed) for seed in range(2)]
    assert {frame.size for frame in resize_frames(frames, 32, "row", listed=True)} == {(448, 320)}
    # a listed video goes through the image resize first (qwen_vl_utils' order); here it lands on the same size
    assert resize_frames(frames, 32, "row", listed=False)[0].size == (448, 320)
    assert listed_frames([b"frame"]) and listed_frames({"frames": ["a.png"]})
    assert not listed_frames("clip.avi") and not listed_frames({"path": "clip.avi"})


def test_the_dataset_resizes_images_before_the_processor(tmp_path: Path, processor) -> None:
    """With data.image_patch_size=16 a 100x60 image reaches the tiny processor as 96x64, so the processor's
    own resize (factor 28) gives 4x6 patches instead of the 4x8 of the image as it is."""
    image = noise(100, 60)
    files = image_rows(tmp_path / "train.parquet", [{"bytes": png(image)}, {"bytes": png(image), "min_pixels": 50000}])
    config = {"max_prompt_length": 64, "image_patch_size": 16}
    resized = RLDataset(files, processor.tokenizer, config, processor=processor)
    plain = RLDataset(files, processor.tokenizer, {"max_prompt_length": 64}, processor=processor)
    assert [im.size for im in resized[0]["multi_modal_data"]["image"]] == [(96, 64)]
    assert [im.size for im in resized[1]["multi_modal_data"]["image"]] == [(320, 192)]
    assert [im.size for im in plain[0]["multi_modal_data"]["image"]] == [(100, 60)]
    assert resized[0]["multi_modal_inputs"]["image_grid_thw"].tolist() == [[1, 4, 6]]
    assert plain[0]["multi_modal_inputs"]["image_grid_thw"].tolist() == [[1, 4, 8]]
    expected = processor.image_processor(images=[image.resize((96, 64))], return_tensors="pt")["pixel_values"]
    torch.testing.assert_close(resized[0]["multi_modal_inputs"]["pixel_values"], expected)
    assert len(resized[0]["raw_prompt_ids"]) < len(plain[0]["raw_prompt_ids"])


def test_the_dataset_names_the_row_of_an_image_it_cannot_resize(tmp_path: Path, processor) -> None:
    files = image_rows(tmp_path / "train.parquet", [{"bytes": png(noise(56, 56))}, {"bytes": png(noise(600, 2))}])
    with pytest.raises(DataError, match=r"train.parquet.*row 1.*key 'images'\[0\]: .*aspect ratio must be below 200"):
        RLDataset(files, processor.tokenizer, {"max_prompt_length": 64, "image_patch_size": 16}, processor=processor)
    with pytest.raises(DataError, match="data.image_patch_size must be a positive integer or null, got 0"):
        RLDataset(files, processor.tokenizer, {"max_prompt_length": 64, "image_patch_size": 0}, processor=processor)


def test_the_dataset_resizes_listed_video_frames(tmp_path: Path, processor) -> None:
    frames = [{"bytes": png(noise(84, 56, seed))} for seed in range(2)]
    row = {
        "data_source": "tiny/digits",
        "prompt": [{"role": "user", "content": "<video>count"}],
        "videos": [frames],
        "reward_model": {"style": "rule", "ground_truth": "1"},
    }
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "train.parquet")
    config = {"max_prompt_length": 256, "image_patch_size": 16}
    ds = RLDataset(str(tmp_path / "train.parquet"), processor.tokenizer, config, processor=processor)
    assert [frame.size for frame in ds[0]["multi_modal_data"]["video"][0]] == [(448, 320)] * 2


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2-VL and its processor, written once."""
    return build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "qwen2_vl")


def test_the_dry_run_names_the_resize_and_rejects_a_bad_patch_size(vlm_dir: Path, tmp_path: Path) -> None:
    train = image_rows(tmp_path / "train.parquet", [{"bytes": png(noise(56, 56))}])
    result = dry_run(f"data.train_files={train}", f"actor_rollout_ref.model.path={vlm_dir}", "data.image_patch_size=16")
    assert result.exit_code == 0, result.output
    assert (
        "resize: each image first as verl does (data.image_patch_size=16 x merge size 2: sides in multiples of 32"
        in (result.output)
    )
    plain = dry_run(f"data.train_files={train}", f"actor_rollout_ref.model.path={vlm_dir}")
    assert plain.exit_code == 0, plain.output
    assert "resize:" not in plain.output
    bad = dry_run(f"data.train_files={train}", f"actor_rollout_ref.model.path={vlm_dir}", "data.image_patch_size=0")
    assert bad.exit_code == 2, bad.output
    assert "data.image_patch_size must be a positive integer or null, got 0" in bad.output
