"""Image rows in the prompt dataset: verl's multimodal schema rendered by a real (tiny) Qwen2-VL processor,
collated into a Batch, and bad image data rejected naming the file, the row and the key."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image
from rlcore_testkit.tiny_vlm import build_processor, build_vl_tokenizer

from rlcore.data import DataError
from rlcore.data.collate import collate_rows
from rlcore.data.loader import PromptLoader
from rlcore.data.multimodal import load_image
from rlcore.data.rl_dataset import RLDataset


@pytest.fixture(scope="module")
def processor():
    """The tiny VLM's processor (slow Qwen2-VL image processor, 4..16 merged tokens per image)."""
    return build_processor(build_vl_tokenizer())


def png(color: str, size: tuple[int, int] = (56, 56)) -> bytes:
    """A one-colour PNG image's bytes."""
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def row(content: str, images: list | None, answer: str = "1") -> dict:
    """A verl-schema row with an ``images`` column."""
    return {
        "data_source": "hiyouga/geometry3k",
        "prompt": [{"role": "user", "content": content}],
        "images": images,
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"index": 0},
    }


def write(path: Path, rows: list[dict]) -> str:
    """Write rows as parquet (pyarrow infers the ``images`` struct from the first non-null entry)."""
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def cfg(**overrides) -> dict:
    """A data config with room for a few images."""
    return {"max_prompt_length": 128, "truncation": "error", **overrides}


def image_pad_count(processor, ids) -> int:
    """How many ``<|image_pad|>`` tokens ``ids`` hold."""
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    return int((torch.as_tensor(ids) == pad).sum())


def test_image_rows_render_through_the_processor(tmp_path: Path, processor) -> None:
    (tmp_path / "red.png").write_bytes(png("red", (84, 56)))
    rows = [
        row("<image> How many red squares?", [{"bytes": png("blue")}]),
        row("Compare <image> with <image>.", [{"path": "red.png"}, {"bytes": png("green"), "path": None}]),
        row("A text-only question.", None),
    ]
    ds = RLDataset(write(tmp_path / "train.parquet", rows), processor.tokenizer, cfg(), processor=processor)
    assert ds.has_images
    first, second, text = ds[0], ds[1], ds[2]
    grid = first["multi_modal_inputs"]["image_grid_thw"]
    assert grid.tolist() == [[1, 4, 4]]  # 56x56 pixels: 4x4 patches of 14, merged 2x2 into 4 tokens
    assert image_pad_count(processor, first["raw_prompt_ids"]) == 4
    assert first["multi_modal_inputs"]["pixel_values"].shape == (16, 3 * 2 * 14 * 14)
    assert [im.size for im in first["multi_modal_data"]["image"]] == [(56, 56)]
    assert first["multi_modal_data"]["image"][0].getpixel((0, 0)) == (0, 0, 255)
    assert second["multi_modal_inputs"]["image_grid_thw"].tolist() == [[1, 4, 6], [1, 4, 4]]
    assert image_pad_count(processor, second["raw_prompt_ids"]) == 6 + 4
    assert ds.prompt_length(1) == len(second["raw_prompt_ids"])
    text_ids = processor.tokenizer.apply_chat_template(
        [{"role": "user", "content": "A text-only question."}], add_generation_prompt=True, tokenize=False
    )
    assert text["raw_prompt_ids"] == processor.tokenizer(text_ids, add_special_tokens=False)["input_ids"]
    assert text["multi_modal_data"] is None and text["multi_modal_inputs"] is None
    assert first["raw_prompt"][0]["content"] == "<image> How many red squares?"  # the messages as written

    batch = collate_rows([first, second, text])
    assert batch["input_ids"].shape == (3, 128)
    assert batch.non_tensors["multi_modal_inputs"][1]["image_grid_thw"].shape == (2, 3)
    assert batch.non_tensors["multi_modal_data"][2] is None
    loader = PromptLoader(ds, 2, shuffle=True, seed=0)
    assert len(loader.next_batch().non_tensors["multi_modal_data"]) == 2


def test_text_only_datasets_have_no_multimodal_fields(tmp_path: Path, processor) -> None:
    path = write(tmp_path / "t.parquet", [row("What is 2 + 2?", None)])
    for proc in (None, processor):
        item = RLDataset(path, processor.tokenizer, cfg(), processor=proc)[0]
        assert "multi_modal_data" not in item and "multi_modal_inputs" not in item


def test_image_tokens_count_towards_the_prompt_length(tmp_path: Path, processor) -> None:
    rows = [row("<image> big", [{"bytes": png("red", (112, 112))}]), row("small text", None)]
    path = write(tmp_path / "long.parquet", rows)
    full = RLDataset(path, processor.tokenizer, cfg(), processor=processor)
    long_ids = full.prompt_length(0)
    assert image_pad_count(processor, full[0]["raw_prompt_ids"]) == 16 and long_ids > 16
    limit = long_ids - 1  # the text alone fits; with the image tokens it does not
    filtered = RLDataset(
        path, processor.tokenizer, cfg(max_prompt_length=limit, filter_overlong_prompts=True), processor=processor
    )
    assert len(filtered) == 1 and filtered.num_filtered == 1 and not filtered.has_images
    with pytest.raises(DataError, match=r"long\.parquet, row 0: the chat-templated prompt has \d+ tokens"):
        RLDataset(path, processor.tokenizer, cfg(max_prompt_length=limit), processor=processor)
    with pytest.raises(DataError, match=r"long\.parquet, row 0: .*cutting it would cut image tokens"):
        RLDataset(path, processor.tokenizer, cfg(max_prompt_length=limit, truncation="left"), processor=processor)


BAD_ROWS = [
    (
        row("<image> missing", [{"path": "nowhere.png"}]),
        r"key 'images'\[0\]: image file .*nowhere\.png.* does not exist",
    ),
    (
        row("<image> corrupt", [{"bytes": b"not a png at all"}]),
        r"key 'images'\[0\]: the bytes are not a readable image",
    ),
    (
        row("<image> and <image>", [{"bytes": png("red")}]),
        r"the prompt has 2 <image> placeholder\(s\) but key 'images' holds 1",
    ),
    (
        row("no placeholder", [{"bytes": png("red")}]),
        r"the prompt has 0 <image> placeholder\(s\) but key 'images' holds 1",
    ),
    (row("<image> a url", [{"path": "https://example.com/a.png"}]), r"key 'images'\[0\]: .* is a URL"),
    (row("<image> odd", [{"width": 3}]), r"key 'images'\[0\]: an image object needs 'bytes', 'path' or 'image'"),
    (row("<image> str", "a.png"), r"key 'images' \(data.image_key\) must be a list of images"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_ROWS, ids=[m[:30] for _, m in BAD_ROWS])
def test_bad_image_rows_name_the_file_row_and_key(tmp_path: Path, processor, bad: dict, message: str) -> None:
    good = row("<image> fine", [{"bytes": png("red")}])
    rows = [good, bad]
    if isinstance(bad["images"], str):  # parquet needs one type per column: the string row goes alone in jsonl
        import json

        path = tmp_path / "bad.jsonl"
        path.write_text("".join(json.dumps({**r, "images": r["images"] if r is bad else None}) + "\n" for r in rows))
        files = str(path)
    else:
        files = write(tmp_path / "bad.parquet", rows)
    with pytest.raises(DataError, match=r"bad\.(parquet|jsonl), row 1( \(line 2\))?: " + message):
        RLDataset(files, processor.tokenizer, cfg(), processor=processor)


def test_images_or_videos_without_a_processor_and_missing_video_files_are_refused(tmp_path: Path, processor) -> None:
    path = write(tmp_path / "img.parquet", [row("<image> x", [{"bytes": png("red")}])])
    with pytest.raises(DataError, match=r"img\.parquet, row 0: key 'images' holds images but the model has no"):
        RLDataset(path, processor.tokenizer, cfg())
    video = {**row("<video> x", None), "videos": [{"path": "clip.mp4"}]}
    with pytest.raises(DataError, match=r"vid\.parquet, row 0: key 'videos' holds videos but the model has no"):
        RLDataset(write(tmp_path / "vid.parquet", [video]), processor.tokenizer, cfg())
    with pytest.raises(
        DataError, match=r"vid\.parquet, row 0: key 'videos'\[0\]: video file .*clip\.mp4 does not exist"
    ):
        RLDataset(tmp_path / "vid.parquet", processor.tokenizer, cfg(), processor=processor)[0]


def test_image_key_and_entry_forms(tmp_path: Path, processor) -> None:
    import base64

    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "a.png").write_bytes(png("red"))
    data_uri = "data:image/png;base64," + base64.b64encode(png("green")).decode()
    for value in (
        {"image": data_uri},
        {"path": f"file://{tmp_path / 'pics' / 'a.png'}"},
        {"image": Image.new("L", (30, 30))},
    ):
        assert load_image(value, "here").mode == "RGB"
    rows = [{**row("<image> q", None), "pictures": [{"path": "pics/a.png"}]}]
    ds = RLDataset(
        write(tmp_path / "k.parquet", rows), processor.tokenizer, cfg(image_key="pictures"), processor=processor
    )
    assert ds[0]["multi_modal_data"]["image"][0].getpixel((0, 0)) == (255, 0, 0)  # found next to the data file


def test_the_run_plan_checks_the_model_has_a_processor(tmp_path: Path, tiny_model_dir: Path, plugin_manager) -> None:
    from omegaconf import OmegaConf

    from rlcore.config import default_config
    from rlcore.data.image_plan import image_plan

    config = default_config()
    config.actor_rollout_ref.model.path = str(tiny_model_dir)  # a text-only model: no processor
    config.data.train_files = write(tmp_path / "text.parquet", [row("plain", None)])
    assert image_plan(config, plugin_manager.registry) is None
    config.data.val_files = write(tmp_path / "img.parquet", [row("<image> x", [{"bytes": png("red")}])])
    with pytest.raises(
        DataError, match=r"img\.parquet: column 'images' \(data.image_key\) holds images but .* no multimodal processor"
    ):
        image_plan(config, plugin_manager.registry)
    config.actor_rollout_ref.model.path = "Qwen/Qwen2.5-VL-7B-Instruct"  # not local: checked when the run loads it
    assert "loaded when the run starts" in image_plan(
        OmegaConf.create(OmegaConf.to_container(config)), plugin_manager.registry
    )
