"""A folder of data files as ``data.train_files`` / ``data.val_files`` (verl and Hugging Face ``datasets`` users keep
parquet shards in one): its files are read in sorted order; a folder that cannot stand for one split's data is
refused with a message that says it is a folder and what it holds, in the dry run too. Real files throughout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rlcore_plugin_sft.config import load_sft_config
from rlcore_plugin_sft.dataset import SFTDataset
from rlcore_testkit.runs import dry_run

from rlcore.data import DataError
from rlcore.data.files import normalize_files
from rlcore.data.rl_dataset import RLDataset


def row(i: int) -> dict[str, Any]:
    """One verl-schema row whose prompt names ``i``."""
    return {
        "data_source": "tiny/digits",
        "prompt": [{"role": "user", "content": f"question {i}"}],
        "reward_model": {"style": "rule", "ground_truth": str(i)},
    }


def write_parquet(path: Path, numbers: range) -> None:
    pq.write_table(pa.Table.from_pylist([row(i) for i in numbers]), path)


def write_jsonl(path: Path, numbers: range) -> None:
    path.write_text("".join(json.dumps(row(i)) + "\n" for i in numbers))


def prompts(dataset: RLDataset) -> list[str]:
    return [dataset[i]["raw_prompt"][0]["content"] for i in range(len(dataset))]


def test_a_folder_of_parquet_shards_is_read_in_sorted_order(tmp_path: Path, tiny_tokenizer: Any) -> None:
    shards = tmp_path / "train"
    shards.mkdir()
    write_parquet(shards / "part-00001.parquet", range(3, 5))  # written first, read second
    write_parquet(shards / "part-00000.parquet", range(0, 3))
    (shards / "_SUCCESS").write_text("")  # Spark's marker, and a hidden file: left out
    (shards / ".part-00000.parquet.crc").write_text("crc")
    (shards / "README.md").write_text("five rows")  # not a data file: left out
    dataset = RLDataset(str(shards), tiny_tokenizer, {"max_prompt_length": 64})
    assert prompts(dataset) == [f"question {i}" for i in range(5)]
    assert dataset.origin(3).file == str(shards / "part-00001.parquet") and dataset.origin(3).row == 0
    both = RLDataset([str(shards), str(shards / "part-00000.parquet")], tiny_tokenizer, {"max_prompt_length": 64})
    assert len(both) == 8, "a folder and a file in one list"


def test_a_folder_of_jsonl_files_is_read(tmp_path: Path, tiny_tokenizer: Any) -> None:
    folder = tmp_path / "val"
    folder.mkdir()
    write_jsonl(folder / "b.jsonl", range(2, 4))
    write_jsonl(folder / "a.jsonl", range(0, 2))
    dataset = RLDataset(str(folder), tiny_tokenizer, {"max_prompt_length": 64}, split="test")
    assert prompts(dataset) == [f"question {i}" for i in range(4)]


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (
            {},
            r"data.train_files=.*/data is a folder without data files \(.parquet, .jsonl, .json directly inside it\): "
            r"it is empty",
        ),
        (
            {"notes.txt": "", "train/": None, "rows.csv": ""},
            r"is a folder without data files .*: it holds notes.txt, rows.csv, train/; name the files, or a folder",
        ),
        (
            {"a.parquet": "p", "b.jsonl": "j", "c.jsonl": "j"},
            r"is a folder with data files of 2 kinds \(2 .jsonl, 1 .parquet: a.parquet, b.jsonl, c.jsonl\); a folder "
            r"must hold one kind",
        ),
        (
            {"train.parquet": "p", "test.parquet": "p"},
            r"is a folder holding the files of 2 splits \(test, train: test.parquet, train.parquet\); name this split's "
            r"files, e.g. data.train_files=.*/data/test.parquet",
        ),
    ],
    ids=["empty", "no-data-files", "mixed-kinds", "several-splits"],
)
def test_a_folder_that_is_not_one_split_is_refused(
    tmp_path: Path, tiny_tokenizer: Any, layout: dict[str, str | None], message: str
) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    for name, kind in layout.items():
        if kind is None:
            (folder / name).mkdir()
        elif kind == "p":
            write_parquet(folder / name, range(2))
        elif kind == "j":
            write_jsonl(folder / name, range(2))
        else:
            (folder / name).write_text(kind)
    with pytest.raises(DataError, match=message):
        RLDataset(str(folder), tiny_tokenizer, {"max_prompt_length": 64})


def test_val_files_are_named_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"^data.val_files=.* is a folder without data files"):
        normalize_files(str(tmp_path), "test")


def test_sft_reads_a_folder_too(tmp_path: Path, tiny_tokenizer: Any) -> None:
    folder = tmp_path / "sft"
    folder.mkdir()
    for name, pairs in (("b.parquet", [("3+4=", "7")]), ("a.parquet", [("1+1=", "2"), ("2+2=", "4")])):
        pq.write_table(pa.Table.from_pylist([{"question": q, "answer": a} for q, a in pairs]), folder / name)
    data = load_sft_config([], []).data
    dataset = SFTDataset(str(folder), tiny_tokenizer, data)
    assert [dataset.loss_texts(i)[0] for i in range(len(dataset))] == ["2<|im_end|>", "4<|im_end|>", "7<|im_end|>"]
    assert dataset.origin(2).file == str(folder / "b.parquet")


def test_the_dry_run_refuses_a_folder_without_data_and_accepts_one_with_shards(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("")
    result = dry_run(f"data.train_files={empty}", "actor_rollout_ref.model.path=m")
    assert result.exit_code == 2, result.output
    assert f"error: data.train_files={empty} is a folder without data files" in result.output
    assert "it holds notes.txt" in result.output and "Traceback" not in result.output
    shards = tmp_path / "shards"
    shards.mkdir()
    write_parquet(shards / "part-0.parquet", range(2))
    result = dry_run(f"data.train_files={shards}", f"data.val_files={empty}", "actor_rollout_ref.model.path=m")
    assert result.exit_code == 2 and f"error: data.val_files={empty} is a folder without data files" in result.output
    result = dry_run(f"data.train_files={shards}", f"data.val_files={shards}", "actor_rollout_ref.model.path=m")
    assert result.exit_code == 0, result.output
