"""The dataset: the question/answer conversion and rlcore's contract suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlcore.api import RLCoreError
from rlcore_testkit.contracts import DatasetContract
from rlcore_plugin_{{ cookiecutter.underscored }}.dataset import DATA_SOURCE, QuestionAnswerDataset

QUESTIONS = [
    {"question": "John has 5 apples and buys 7 more. How many apples does he have?", "answer": 12},
    {"question": "Mary sold 4 of her 10 oranges. How many oranges are left?", "answer": "6"},
    {"question": "What is the sum of 12 and 30?", "answer": 42, "data_source": "openai/gsm8k"},
]


def write_jsonl(path: Path, records: list[dict]) -> str:
    """Write ``records`` as JSON lines; returns the path as a string."""
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return str(path)


def test_rows_carry_answer_and_data_source(tmp_path: Path, tiny_tokenizer) -> None:
    """The answer becomes the ground truth (as text); a row without data_source gets the plugin's."""
    dataset = QuestionAnswerDataset(write_jsonl(tmp_path / "qa.jsonl", QUESTIONS), tiny_tokenizer, None)
    rows = [dataset[i] for i in range(len(dataset))]
    assert [row["reward_model"]["ground_truth"] for row in rows] == ["12", "6", "42"]
    assert [row["data_source"] for row in rows] == [DATA_SOURCE, DATA_SOURCE, "openai/gsm8k"]


def test_a_bad_line_names_file_and_line(tmp_path: Path, tiny_tokenizer) -> None:
    """A line without 'answer' is an error naming where it is."""
    path = write_jsonl(tmp_path / "bad.jsonl", [QUESTIONS[0], {"question": "no answer"}])
    with pytest.raises(RLCoreError, match="bad.jsonl:2"):
        QuestionAnswerDataset(path, tiny_tokenizer, None)


class TestDatasetContract(DatasetContract):
    """rlcore's behavioural checks for ``data.dataset={{ cookiecutter.hyphenated }}``."""

    component_name = "{{ cookiecutter.hyphenated }}"

    @pytest.fixture
    def dataset_files(self, tmp_path: Path) -> list[str]:
        """Two files of question/answer lines."""
        return [write_jsonl(tmp_path / "a.jsonl", QUESTIONS[:2]), write_jsonl(tmp_path / "b.jsonl", QUESTIONS[2:])]
