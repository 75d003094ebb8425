"""Tests of the prompt dataset, collation, the resumable loader, custom dataset classes and GSM8K prep."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from rlcore_testkit.contracts.data import DatasetContract

from rlcore.config.sections.data import CustomClsConfig, DataConfig
from rlcore.data import DataError
from rlcore.data.collate import collate_rows
from rlcore.data.custom import load_dataset_class
from rlcore.data.loader import PromptLoader
from rlcore.data.rl_dataset import RLDataset, truncate_ids
from rlcore.registry import Registry

QUESTIONS = [
    "how many apples did john buy",
    "mary had 3 oranges and bought 4 more; how many oranges has she",
    "what is the sum of 12 and 30",
    "each box has 6 apples and there are 7 boxes. how many apples in total",
    "john sold 5 of his 9 apples. how many are left",
    "the cost of one apple is 2 dollars. what is the cost of 8 apples",
]


def make_row(i: int, question: str) -> dict:
    """One verl-schema row."""
    return {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": question}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(i)},
        "extra_info": {"split": "train", "index": 100 + i},
    }


ROWS = [make_row(i, q) for i, q in enumerate(QUESTIONS)]


def write_jsonl(path: Path, rows: list) -> str:
    """Write rows one JSON object per line."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def write_parquet(path: Path, rows: list) -> str:
    """Write rows as parquet."""
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def cfg(**overrides) -> dict:
    """A data config: generous length, error truncation, plus overrides."""
    return {"max_prompt_length": 64, "truncation": "error", **overrides}


def templated_ids(tokenizer, messages) -> list[int]:
    """What the dataset should produce before truncation."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture
def jsonl_file(tmp_path) -> str:
    return write_jsonl(tmp_path / "train.jsonl", ROWS)


@pytest.fixture
def parquet_file(tmp_path) -> str:
    return write_parquet(tmp_path / "train.parquet", ROWS)


# ------------------------------------------------------------------ loading


def test_parquet_and_jsonl_give_the_same_rows(jsonl_file, parquet_file, tiny_tokenizer):
    a = RLDataset(jsonl_file, tiny_tokenizer, cfg())
    b = RLDataset([parquet_file], tiny_tokenizer, cfg())
    assert len(a) == len(b) == len(ROWS)
    for i in range(len(ROWS)):
        ra, rb = a[i], b[i]
        assert torch.equal(ra["input_ids"], rb["input_ids"])
        assert ra["raw_prompt"] == rb["raw_prompt"] == ROWS[i]["prompt"]
        assert ra["reward_model"] == rb["reward_model"] == {"style": "rule", "ground_truth": str(i)}
        assert ra["data_source"] == "openai/gsm8k"
        assert ra["index"] == rb["index"] == 100 + i


def test_several_files_concatenate_and_index_defaults_to_row_number(tmp_path, tiny_tokenizer):
    no_index = [{k: v for k, v in r.items() if k != "extra_info"} for r in ROWS[:2]]
    first = write_jsonl(tmp_path / "a.jsonl", no_index)
    second = write_parquet(tmp_path / "b.parquet", ROWS[2:4])
    ds = RLDataset([first, second], tiny_tokenizer, cfg())
    assert len(ds) == 4
    assert [ds[i]["index"] for i in range(4)] == [0, 1, 102, 103]
    assert ds[0]["extra_info"] == {}


def test_json_array_file(tmp_path, tiny_tokenizer):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(ROWS[:3]))
    assert len(RLDataset(str(path), tiny_tokenizer, cfg())) == 3


def test_chat_template_applied_and_left_padded(jsonl_file, tiny_tokenizer):
    ds = RLDataset(jsonl_file, tiny_tokenizer, cfg())
    row = ds[1]
    expected = templated_ids(tiny_tokenizer, ROWS[1]["prompt"])
    assert row["raw_prompt_ids"] == expected
    assert tiny_tokenizer.decode(expected).endswith("<|im_start|>assistant\n")
    n = len(expected)
    assert row["input_ids"][-n:].tolist() == expected
    assert row["input_ids"][:-n].eq(tiny_tokenizer.pad_token_id).all()
    assert row["attention_mask"].tolist() == [0] * (64 - n) + [1] * n
    assert row["position_ids"].tolist() == [0] * (64 - n) + list(range(n))
    assert all(row[k].dtype == torch.long for k in ("input_ids", "attention_mask", "position_ids"))


def test_chat_template_kwargs_and_return_raw_chat(jsonl_file, tiny_tokenizer):
    config = cfg(return_raw_chat=False, apply_chat_template_kwargs={"unused_flag": True})
    ds = RLDataset(jsonl_file, tiny_tokenizer, config)
    assert "raw_prompt" not in ds[0]


# ------------------------------------------------------------------ truncation


@pytest.mark.parametrize(
    "mode, keep",
    [
        ("left", lambda ids, n: ids[-n:]),
        ("right", lambda ids, n: ids[:n]),
        ("middle", lambda ids, n: ids[: n // 2] + ids[-(n - n // 2) :]),
    ],
)
def test_truncation_modes_keep_the_right_ids(mode, keep, jsonl_file, tiny_tokenizer):
    n = 9
    ds = RLDataset(jsonl_file, tiny_tokenizer, cfg(max_prompt_length=n, truncation=mode))
    for i, row in enumerate(ROWS):
        full = templated_ids(tiny_tokenizer, row["prompt"])
        assert len(full) > n
        item = ds[i]
        assert item["input_ids"].tolist() == keep(full, n)
        assert item["raw_prompt_ids"] == keep(full, n)
        assert item["attention_mask"].eq(1).all()


def test_truncate_ids_helper():
    ids = list(range(10))
    assert truncate_ids(ids, 4, "left") == [6, 7, 8, 9]
    assert truncate_ids(ids, 4, "right") == [0, 1, 2, 3]
    assert truncate_ids(ids, 5, "middle") == [0, 1, 7, 8, 9]
    assert truncate_ids(ids, 20, "left") == ids


def test_error_truncation_names_file_row_and_lengths(tmp_path, tiny_tokenizer):
    rows = [make_row(0, "short"), make_row(1, " ".join(["apples"] * 80))]
    path = write_jsonl(tmp_path / "long.jsonl", rows)
    full = len(templated_ids(tiny_tokenizer, rows[1]["prompt"]))
    with pytest.raises(DataError) as err:
        RLDataset(path, tiny_tokenizer, cfg(max_prompt_length=32))
    message = str(err.value)
    assert f"{path}, row 1 (line 2)" in message
    assert f"{full} tokens" in message and "max_prompt_length=32" in message


def test_invalid_truncation_mode(jsonl_file, tiny_tokenizer):
    with pytest.raises(DataError, match="data.truncation='sideways'"):
        RLDataset(jsonl_file, tiny_tokenizer, cfg(truncation="sideways"))


def test_filter_overlong_prompts(tmp_path, tiny_tokenizer, caplog):
    rows = [make_row(0, "short"), make_row(1, " ".join(["apples"] * 80)), make_row(2, "also short")]
    path = write_parquet(tmp_path / "mixed.parquet", rows)
    with caplog.at_level(logging.WARNING, logger="rlcore.data.rl_dataset"):
        ds = RLDataset(path, tiny_tokenizer, cfg(max_prompt_length=32, filter_overlong_prompts=True))
    assert len(ds) == 2 and ds.num_filtered == 1
    assert [ds[i]["reward_model"]["ground_truth"] for i in range(2)] == ["0", "2"]
    assert "dropped 1 of 3 rows" in caplog.text


def test_filter_dropping_everything_is_an_error(jsonl_file, tiny_tokenizer):
    with pytest.raises(DataError, match="every row is longer"):
        RLDataset(jsonl_file, tiny_tokenizer, cfg(max_prompt_length=4, filter_overlong_prompts=True))


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"prompt": []}, r"row 1 \(line 2\): key 'prompt' is empty"),
        ({"prompt": [{"role": "user", "content": "  "}]}, r"row 1 \(line 2\): key 'prompt' is an empty prompt"),
        ({"prompt": [{"content": "hi"}]}, r"row 1 \(line 2\): key 'prompt'\[0\] has no string 'role'"),
        ({"prompt": [{"role": "user"}]}, r"row 1 \(line 2\): key 'prompt'\[0\] has no string 'content'"),
        ({"prompt": "just a string"}, r"row 1 \(line 2\): key 'prompt' must be a list"),
        ({"prompt": None}, r"row 1 \(line 2\): missing key 'prompt'"),
        ({"reward_model": None}, r"row 1 \(line 2\): missing key 'reward_model'"),
        ({"reward_model": {"style": "rule"}}, r"row 1 \(line 2\): missing key 'reward_model.ground_truth'"),
        ({"data_source": None}, r"row 1 \(line 2\): missing key 'data_source'"),
        ({"extra_info": [1, 2]}, r"row 1 \(line 2\): key 'extra_info' must be an object"),
    ],
)
def test_bad_rows_name_file_row_and_key(bad, match, tmp_path, tiny_tokenizer):
    rows = [ROWS[0], {**ROWS[1], **bad}]
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataError, match=match) as err:
        RLDataset(path, tiny_tokenizer, cfg())
    assert str(path) in str(err.value)


def test_missing_prompt_key_in_parquet_names_the_key(tmp_path, tiny_tokenizer):
    rows = [{k: v for k, v in r.items() if k != "prompt"} | {"messages": r["prompt"]} for r in ROWS[:2]]
    path = write_parquet(tmp_path / "msgs.parquet", rows)
    with pytest.raises(DataError, match=r"msgs.parquet, row 0: missing key 'prompt' \(data.prompt_key\)"):
        RLDataset(path, tiny_tokenizer, cfg())
    assert len(RLDataset(path, tiny_tokenizer, cfg(prompt_key="messages"))) == 2


def test_file_errors(tmp_path, tiny_tokenizer):
    with pytest.raises(DataError, match="does not exist"):
        RLDataset(str(tmp_path / "nope.parquet"), tiny_tokenizer, cfg())
    (tmp_path / "rows.csv").write_text("a,b\n")
    with pytest.raises(DataError, match=r"rows.csv: unsupported data file extension '.csv'"):
        RLDataset(str(tmp_path / "rows.csv"), tiny_tokenizer, cfg())
    (tmp_path / "broken.parquet").write_bytes(b"not a parquet file")
    with pytest.raises(DataError, match=r"broken.parquet: cannot read parquet file"):
        RLDataset(str(tmp_path / "broken.parquet"), tiny_tokenizer, cfg())
    (tmp_path / "broken.jsonl").write_text(json.dumps(ROWS[0]) + "\n{oops\n")
    with pytest.raises(DataError, match=r"broken.jsonl, line 2: invalid JSON"):
        RLDataset(str(tmp_path / "broken.jsonl"), tiny_tokenizer, cfg())
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match="no rows"):
        RLDataset(str(tmp_path / "empty.jsonl"), tiny_tokenizer, cfg())


# ------------------------------------------------------------------ max_samples


def test_max_samples_first_rows_or_seeded_subset(jsonl_file, tiny_tokenizer):
    first = RLDataset(jsonl_file, tiny_tokenizer, cfg(train_max_samples=3, shuffle=False))
    assert [first[i]["index"] for i in range(3)] == [100, 101, 102]
    subsets = [RLDataset(jsonl_file, tiny_tokenizer, cfg(train_max_samples=3, shuffle=True, seed=s)) for s in (7, 7, 8)]
    picks = [[d[i]["index"] for i in range(len(d))] for d in subsets]
    assert len(picks[0]) == 3 and picks[0] == picks[1] and picks[0] != picks[2]
    assert all(p == sorted(p) and set(p) <= {r["extra_info"]["index"] for r in ROWS} for p in picks)
    val = RLDataset(jsonl_file, tiny_tokenizer, cfg(train_max_samples=1, val_max_samples=2), split="val")
    assert len(val) == 2
    assert len(RLDataset(jsonl_file, tiny_tokenizer, cfg(train_max_samples=-1))) == len(ROWS)


# ------------------------------------------------------------------ collate + loader


def test_collate_rows(jsonl_file, tiny_tokenizer):
    ds = RLDataset(jsonl_file, tiny_tokenizer, cfg())
    batch = collate_rows([ds[0], ds[1]])
    assert len(batch) == 2 and batch["input_ids"].shape == (2, 64)
    assert batch["raw_prompt_ids"].dtype == object and batch["raw_prompt_ids"].shape == (2,)
    assert batch["raw_prompt"][1] == ROWS[1]["prompt"]
    with pytest.raises(DataError, match="different keys"):
        collate_rows([ds[0], {"input_ids": ds[1]["input_ids"]}])


class IndexDataset:
    """Rows that only carry their index, for loader tests."""

    split = "train"

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"row": torch.tensor([i])}


def ids_of(batch) -> list[int]:
    return batch["row"].flatten().tolist()


def test_loader_is_deterministic_and_reshuffles_each_epoch():
    a = PromptLoader(IndexDataset(10), 3, shuffle=True, seed=5)
    b = PromptLoader(IndexDataset(10), 3, shuffle=True, seed=5)
    assert len(a) == a.batches_per_epoch == 3
    seq_a = [ids_of(a.next_batch()) for _ in range(7)]
    assert seq_a == [ids_of(b.next_batch()) for _ in range(7)]
    assert a.epoch == 2 and a.position == 1
    epoch0 = sum(seq_a[:3], [])
    assert len(set(epoch0)) == 9
    assert epoch0 != sum(seq_a[3:6], [])
    plain = PromptLoader(IndexDataset(7), 3, shuffle=False, seed=0)
    assert [ids_of(x) for x in plain] == [[0, 1, 2], [3, 4, 5]]
    assert [ids_of(x) for x in plain] == [[0, 1, 2], [3, 4, 5]]
    assert plain.epoch == 1


@pytest.mark.parametrize("consumed", [2, 3, 4, 6])
def test_loader_resume_gives_the_same_next_batches(consumed):
    """Mid-epoch (2, 4) and exactly at epoch boundaries (3, 6) with 3 batches per epoch."""
    reference = PromptLoader(IndexDataset(10), 3, shuffle=True, seed=11)
    expected = [ids_of(reference.next_batch()) for _ in range(consumed + 5)][consumed:]
    interrupted = PromptLoader(IndexDataset(10), 3, shuffle=True, seed=11)
    for _ in range(consumed):
        interrupted.next_batch()
    state = json.loads(json.dumps(interrupted.state_dict()))
    resumed = PromptLoader(IndexDataset(10), 3, shuffle=True, seed=999)
    resumed.load_state_dict(state)
    assert state["seed"] == 11
    assert [ids_of(resumed.next_batch()) for _ in range(5)] == expected


def test_loader_iteration_resumes_mid_epoch():
    loader = PromptLoader(IndexDataset(9), 3, shuffle=True, seed=1)
    full = [ids_of(b) for b in loader]
    again = PromptLoader(IndexDataset(9), 3, shuffle=True, seed=1)
    again.next_batch()
    resumed = PromptLoader(IndexDataset(9), 3, shuffle=True, seed=1)
    resumed.load_state_dict(again.state_dict())
    assert [ids_of(b) for b in resumed] == full[1:]


def test_loader_errors_and_partial_batches():
    with pytest.raises(DataError, match="train data has 2 rows, fewer than one batch of 4"):
        PromptLoader(IndexDataset(2), 4, shuffle=False, seed=0)
    with pytest.raises(DataError, match="val data has 2 rows"):
        PromptLoader(IndexDataset(2), 4, shuffle=False, seed=0, split="val")
    loose = PromptLoader(IndexDataset(5), 4, shuffle=False, seed=0, drop_last=False)
    assert len(loose) == 2 and [ids_of(b) for b in loose] == [[0, 1, 2, 3], [4]]
    with pytest.raises(DataError, match="missing key 'position'"):
        loose.load_state_dict({"epoch": 0, "seed": 0})


def test_loader_over_the_real_dataset(jsonl_file, tiny_tokenizer):
    ds = RLDataset(jsonl_file, tiny_tokenizer, cfg())
    batch = PromptLoader(ds, 4, shuffle=True, seed=1).next_batch()
    assert len(batch) == 4 and batch["attention_mask"].shape == (4, 64)
    assert set(batch["data_source"]) == {"openai/gsm8k"}


# ------------------------------------------------------------------ custom dataset class


def custom_data(path: str, name: str) -> DataConfig:
    """A ``data`` section naming the dataset class ``name`` in the file ``path`` (data.custom_cls)."""
    return DataConfig(custom_cls=CustomClsConfig(path=path, name=name))


def test_custom_cls_from_file(tmp_path, plugin_manager):
    source = tmp_path / "my_data.py"
    source.write_text(
        '"""A custom dataset."""\n'
        "from rlcore.data.rl_dataset import RLDataset\n\n"
        "class Shouting(RLDataset):\n"
        '    """Marks itself."""\n'
        "    loud = True\n"
    )
    cls = load_dataset_class(custom_data(str(source), "Shouting"), Registry())
    assert cls.__name__ == "Shouting" and cls.loud
    with pytest.raises(DataError, match=r"my_data.py' defines no 'Missing'"):
        load_dataset_class(custom_data(str(source), "Missing"), Registry())
    with pytest.raises(DataError, match=r"data.custom_cls.path='.*nope.py': file does not exist"):
        load_dataset_class(custom_data(str(tmp_path / "nope.py"), "X"), Registry())


def test_registry_dataset_and_unknown_name(plugin_manager):
    assert load_dataset_class(DataConfig(dataset="rl"), plugin_manager.registry) is RLDataset
    assert load_dataset_class(DataConfig(dataset="jsonl"), plugin_manager.registry) is RLDataset
    from rlcore.errors import RLCoreError

    with pytest.raises(RLCoreError, match="unknown dataset 'parket'"):
        load_dataset_class(DataConfig(dataset="parket"), plugin_manager.registry)


# ------------------------------------------------------------------ contract


class TestRLDatasetContract(DatasetContract):
    component_name = "rl"

    @pytest.fixture
    def dataset_files(self, tmp_path):
        return [write_jsonl(tmp_path / "a.jsonl", ROWS[:3]), write_parquet(tmp_path / "b.parquet", ROWS[3:])]
