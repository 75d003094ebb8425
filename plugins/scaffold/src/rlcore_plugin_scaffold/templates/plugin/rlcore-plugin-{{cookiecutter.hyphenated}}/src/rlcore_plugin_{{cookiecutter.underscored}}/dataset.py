"""The prompt dataset ``{{ cookiecutter.hyphenated }}`` (``data.dataset={{ cookiecutter.hyphenated }}``).

What it reads: JSON lines of ``{"question": ..., "answer": ...}`` (optionally ``"data_source"``; the
default is ``{{ cookiecutter.hyphenated }}``). Each line becomes a row in the verl schema — a one-message chat prompt,
``reward_model.ground_truth`` = the answer, ``extra_info`` with the split and the line's index — and the
rows are handed to the dataset registered as :data:`BASE_DATASET` (rlcore's built-in ``rl`` dataset),
which applies the chat template, truncation, the overlong filter and left padding exactly as in any run.

What to change: :func:`to_row` (the prompt wording, which fields become ground truth and extra
information) and :func:`read_records` (your file format). ``tests/test_dataset.py`` runs rlcore's
contract suite on it.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from rlcore import get_component
from rlcore.api import RLCoreError

#: the registered dataset that tokenises and pads the converted rows
BASE_DATASET = "rl"
#: ``data_source`` of rows that name none (picks the reward scorer)
DATA_SOURCE = "{{ cookiecutter.hyphenated }}"
PROMPT = "{question}\nGive the final answer as a number at the end."


def read_records(path: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file; an error names the file and line."""
    records = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RLCoreError(f"{path}:{number}: not a JSON object: {exc}") from exc
            if not isinstance(record, dict) or "question" not in record or "answer" not in record:
                raise RLCoreError(f"{path}:{number}: expected an object with 'question' and 'answer'")
            records.append(record)
    return records


def to_row(record: dict[str, Any], index: int, split: str) -> dict[str, Any]:
    """One verl-schema row from a question/answer record."""
    return {
        "data_source": record.get("data_source", DATA_SOURCE),
        "prompt": [{"role": "user", "content": PROMPT.format(question=record["question"])}],
        "reward_model": {"style": "rule", "ground_truth": str(record["answer"])},
        "extra_info": {"split": split, "index": index},
    }


class QuestionAnswerDataset:
    """Question/answer JSON lines, served through the :data:`BASE_DATASET` dataset.

    Args:
        files: one path or a list of paths of ``.jsonl`` files, concatenated in order.
        tokenizer: the policy's tokenizer (chat template, pad token).
        config: the ``data`` config section (``max_prompt_length``, ``truncation``, ...).
        split: ``"train"`` or a validation split name.
    """

    def __init__(self, files: Any, tokenizer: Any, config: Any, split: str = "train") -> None:
        self.split = split
        paths = [files] if isinstance(files, (str, Path)) else list(files)
        records = [record for path in paths for record in read_records(str(path))]
        if not records:
            raise RLCoreError(f"{split} data {', '.join(map(str, paths))}: no rows")
        # the converted rows live as long as this dataset: the base dataset may read them lazily
        self._workdir = tempfile.TemporaryDirectory(prefix="rlcore-plugin-{{ cookiecutter.hyphenated }}-")
        converted = Path(self._workdir.name) / f"{split}.jsonl"
        converted.write_text("".join(json.dumps(to_row(r, i, split)) + "\n" for i, r in enumerate(records)))
        self.base = get_component("dataset", BASE_DATASET)(str(converted), tokenizer, config, split)

    def __len__(self) -> int:
        """The number of rows (after the base dataset's overlong filter)."""
        return len(self.base)

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Row ``i``: left-padded ``input_ids``/``attention_mask``/``position_ids`` and the row's fields."""
        return self.base[i]
