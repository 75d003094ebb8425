"""``rlcore data gsm8k``: GSM8K's ``{question, answer}`` lines to verl-schema parquet (the real GSM8K's first
lines), read back by the prompt dataset; bad lines are named by file and line."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from rlcore_plugin_tasks.prepare.gsm8k import INSTRUCTION, prepare_gsm8k

from rlcore.cli import cli
from rlcore.data import DataError
from rlcore.data.rl_dataset import RLDataset
from rlcore.plugins import load_plugins

GSM8K_DIR = Path("/work/shared/data/gsm8k")


@pytest.fixture
def gsm8k_sample(tmp_path) -> Path:
    """The first 50 train lines plus line 346 (answer "1,080"), and 20 test lines, of the real GSM8K."""
    src = tmp_path / "gsm8k-src"
    src.mkdir()
    train = (GSM8K_DIR / "train.jsonl").read_text().splitlines()
    (src / "train.jsonl").write_text("\n".join(train[:50] + [train[345]]) + "\n")
    test = (GSM8K_DIR / "test.jsonl").read_text().splitlines()
    (src / "test.jsonl").write_text("\n".join(test[:20]) + "\n")
    return src


def test_prepare_gsm8k(gsm8k_sample, tmp_path, tiny_tokenizer):
    paths = prepare_gsm8k(str(gsm8k_sample), str(tmp_path / "out"))
    assert set(paths) == {"train", "test"}
    train = pq.read_table(paths["train"]).to_pylist()
    assert len(train) == 51 and pq.read_table(paths["test"]).num_rows == 20
    first = json.loads((gsm8k_sample / "train.jsonl").read_text().splitlines()[0])
    assert train[0]["data_source"] == "openai/gsm8k" and train[0]["ability"] == "math"
    assert train[0]["prompt"] == [{"role": "user", "content": first["question"] + " " + INSTRUCTION}]
    assert train[0]["reward_model"] == {"style": "rule", "ground_truth": "72"}
    assert train[0]["extra_info"] == {
        "split": "train",
        "index": 0,
        "answer": first["answer"],
        "question": first["question"],
    }
    assert train[50]["reward_model"]["ground_truth"] == "1080"
    assert train[50]["extra_info"]["answer"].endswith("#### 1,080")
    ds = RLDataset(paths["test"], tiny_tokenizer, {"max_prompt_length": 512, "truncation": "error"}, split="test")
    assert len(ds) == 20 and ds[3]["extra_info"]["split"] == "test"


def test_prepare_gsm8k_malformed_line(gsm8k_sample, tmp_path):
    train = gsm8k_sample / "train.jsonl"
    original = train.read_text()
    lines = original.splitlines()
    lines[4] = json.dumps({"question": "q", "answer": "no final answer here"})
    train.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"train.jsonl, line 5: key 'answer' has no '#### <number>'"):
        prepare_gsm8k(str(gsm8k_sample), str(tmp_path / "out"))
    train.write_text(original)
    (gsm8k_sample / "test.jsonl").unlink()
    with pytest.raises(DataError, match=r"test.jsonl: GSM8K test file does not exist"):
        prepare_gsm8k(str(gsm8k_sample), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_prepare_gsm8k_without_input_needs_datasets(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(DataError, match="pass --input DIR"):
        prepare_gsm8k(None, str(tmp_path / "out"))


@pytest.fixture(scope="module")
def rlcore_cli() -> click.Group:
    """rlcore's command line with the plugins' sub-commands (``rlcore data gsm8k`` among them), as the ``rlcore``
    script builds it."""
    load_plugins().add_commands(cli)
    return cli


def test_the_gsm8k_command_writes_the_splits_and_names_bad_input(
    gsm8k_sample: Path, tmp_path: Path, rlcore_cli: click.Group
) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(rlcore_cli, ["data", "gsm8k", "--input", str(gsm8k_sample), "--local-dir", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output == f"train: {out / 'train.parquet'}\ntest: {out / 'test.parquet'}\n"
    (gsm8k_sample / "test.jsonl").unlink()
    result = CliRunner().invoke(rlcore_cli, ["data", "gsm8k", "--input", str(gsm8k_sample), "--local-dir", str(out)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip().endswith(
        "test.jsonl: GSM8K test file does not exist (expected train.jsonl and test.jsonl)"
    )
