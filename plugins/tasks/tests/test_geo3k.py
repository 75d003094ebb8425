"""``rlcore data geo3k``: a geo3k-style source folder to verl-schema parquet with images, read back by the
prompt dataset through a real (tiny) Qwen2-VL processor and scored by the geo3k scorer."""

from __future__ import annotations

import io
import json
from pathlib import Path

import click
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from PIL import Image
from rlcore_plugin_tasks.prepare.geo3k import DATA_SOURCE, INSTRUCTION, prepare_geo3k
from rlcore_plugin_tasks.scorers.geo3k import compute_score
from rlcore_testkit.tiny_vlm import build_processor, build_vl_tokenizer

from rlcore.cli import cli
from rlcore.data import DataError
from rlcore.data.rl_dataset import RLDataset
from rlcore.plugins import load_plugins


@pytest.fixture(scope="module")
def rlcore_cli() -> click.Group:
    """rlcore's command line with the plugins' sub-commands (``rlcore data geo3k`` among them), as the ``rlcore``
    script builds it."""
    load_plugins().add_commands(cli)
    return cli


def png(color: str) -> bytes:
    """A 56x56 one-colour PNG."""
    buffer = io.BytesIO()
    Image.new("RGB", (56, 56), color).save(buffer, format="PNG")
    return buffer.getvalue()


def hub_snapshot(folder: Path) -> Path:
    """A folder laid out like a download of hiyouga/geometry3k: data/{split}-00000-of-00001.parquet with
    ``images`` as Hugging Face's ``{bytes, path}`` image structs."""
    (folder / "data").mkdir(parents=True)
    rows = {
        "train": [
            {"problem": "<image>Find x.", "answer": "3", "images": [{"bytes": png("red"), "path": "a.png"}]},
            {"problem": "<image>Find y.", "answer": "\\frac{1}{2}", "images": [{"bytes": png("blue"), "path": None}]},
        ],
        "test": [{"problem": "<image>Find z.", "answer": "7", "images": [{"bytes": png("green"), "path": "c.png"}]}],
    }
    for split, split_rows in rows.items():
        pq.write_table(pa.Table.from_pylist(split_rows), folder / "data" / f"{split}-00000-of-00001.parquet")
    return folder


def test_prepare_geo3k_writes_verls_schema_and_the_dataset_reads_it(tmp_path: Path, rlcore_cli: click.Group) -> None:
    result = CliRunner().invoke(
        rlcore_cli,
        ["data", "geo3k", "--input", str(hub_snapshot(tmp_path / "src")), "--local-dir", str(tmp_path / "out")],
    )
    assert result.exit_code == 0, result.output
    assert f"train: {tmp_path / 'out' / 'train.parquet'}" in result.output
    rows = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert [r["reward_model"] for r in rows] == [
        {"style": "rule", "ground_truth": "3"},
        {"style": "rule", "ground_truth": "\\frac{1}{2}"},
    ]
    first = rows[0]
    assert first["data_source"] == DATA_SOURCE == "hiyouga/geometry3k"
    assert first["prompt"] == [{"role": "user", "content": f"<image>Find x. {INSTRUCTION}"}]
    assert first["images"] == [{"bytes": png("red"), "path": "a.png"}]
    assert first["extra_info"] == {"split": "train", "index": 0, "answer": "3", "question": "<image>Find x."}

    processor = build_processor(build_vl_tokenizer())
    ds = RLDataset(
        str(tmp_path / "out" / "test.parquet"),
        processor.tokenizer,
        {"max_prompt_length": 256},
        split="test",
        processor=processor,
    )
    item = ds[0]
    assert item["multi_modal_inputs"]["image_grid_thw"].tolist() == [[1, 4, 4]]
    assert item["multi_modal_data"]["image"][0].getpixel((0, 0)) == (0, 128, 0)
    scorer = load_plugins().registry.load("reward_scorer", item["data_source"])
    answer = "<think>the angle sum</think> so \\boxed{7}"
    assert scorer(item["data_source"], answer, item["reward_model"]["ground_truth"]) == pytest.approx(1.0)


def test_prepare_geo3k_from_jsonl_with_image_paths(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "img").mkdir(parents=True)
    (src / "img" / "1.png").write_bytes(png("red"))
    for split in ("train", "test"):
        (src / f"{split}.jsonl").write_text(
            json.dumps({"problem": "<image>Q", "answer": "2", "images": ["img/1.png"]}) + "\n"
        )
    paths = prepare_geo3k(str(src), str(tmp_path / "out"))
    (row,) = pq.read_table(paths["train"]).to_pylist()
    assert row["images"] == [{"bytes": png("red"), "path": "img/1.png"}]  # embedded: the output stands alone


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (
            {"problem": "<image>Q", "answer": "1", "images": ["nope.png"]},
            r"line 1\): key 'images'\[0\]: image file .*nope\.png does not exist",
        ),
        ({"problem": "<image>Q", "answer": "1", "images": []}, r"line 1\): key 'images' must be a non-empty list"),
        (
            {"problem": "<image><image>Q", "answer": "1", "images": ["a.png"]},
            r"line 1\): key 'problem' has 2 <image> placeholder\(s\) but key 'images' holds 1",
        ),
        ({"problem": "<image>Q", "images": ["a.png"]}, r"line 1\): missing string key 'answer'"),
    ],
)
def test_bad_geo3k_sources_name_the_row(tmp_path: Path, record: dict, message: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.png").write_bytes(png("red"))
    (src / "train.jsonl").write_text(json.dumps(record) + "\n")
    (src / "test.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.raises(DataError, match=r"train\.jsonl, row 0 \(" + message):
        prepare_geo3k(str(src), str(tmp_path / "out"))


def test_bad_geo3k_folders_and_corrupt_images(tmp_path: Path, rlcore_cli: click.Group) -> None:
    with pytest.raises(DataError, match="no geo3k train split"):
        prepare_geo3k(str(tmp_path), str(tmp_path / "out"))
    (tmp_path / "src").mkdir()
    rows = [{"problem": "<image>Q", "answer": "1", "images": [{"bytes": b"\x89PNG broken", "path": None}]}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "src" / "train.parquet")
    with pytest.raises(
        DataError, match=r"train\.parquet, row 0: key 'images'\[0\]: the bytes are not a readable image"
    ):
        prepare_geo3k(str(tmp_path / "src"), str(tmp_path / "out"))
    result = CliRunner().invoke(rlcore_cli, ["data", "geo3k", "--input", str(tmp_path / "missing")])
    assert result.exit_code != 0 and "Traceback" not in result.output and "missing" in result.output


def test_geo3k_scorer_weighs_answer_and_format_as_verl() -> None:
    assert compute_score("<think>r</think> \\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}") == pytest.approx(1.0)
    assert compute_score("no tags \\boxed{3}", "3") == pytest.approx(0.9)
    assert compute_score("<think>r</think> \\boxed{4}", "3") == pytest.approx(0.1)
    assert compute_score("<think>r</think> the answer is 3", "3") == 0.0
    assert compute_score("\\boxed{2} then \\boxed{3}", "3") == pytest.approx(0.9)  # the last box counts
