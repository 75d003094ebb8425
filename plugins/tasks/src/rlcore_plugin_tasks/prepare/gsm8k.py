"""GSM8K preparation: ``{question, answer}`` rows to verl-schema parquet files (``rlcore data gsm8k``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rlcore.api import DataError

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
SPLITS: tuple[str, ...] = ("train", "test")
_ANSWER = re.compile(r"#### (-?[0-9.,]+)")


def extract_ground_truth(answer: str) -> str | None:
    """The number after the first ``#### `` of a GSM8K answer, commas removed (``None`` when absent)."""
    match = _ANSWER.search(answer)
    return match.group(1).replace(",", "") if match else None


def make_row(question: str, answer: str, split: str, index: int, *, where: str) -> dict[str, Any]:
    """One verl-schema row; ``where`` (file and line) is used in the error for an answer without ``####``."""
    ground_truth = extract_ground_truth(answer)
    if ground_truth is None:
        raise DataError(f"{where}: key 'answer' has no '#### <number>' final answer: {answer[-80:]!r}")
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


def _read_jsonl(path: Path, split: str) -> list[dict[str, Any]]:
    if not path.is_file():
        raise DataError(f"{path}: GSM8K {split} file does not exist (expected train.jsonl and test.jsonl)")
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}, line {line_no}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{where}: invalid JSON: {exc.msg}") from exc
            if not isinstance(record, dict):
                raise DataError(f"{where}: expected an object with keys 'question' and 'answer'")
            for key in ("question", "answer"):
                if not isinstance(record.get(key), str):
                    raise DataError(f"{where}: missing string key {key!r}")
            rows.append(make_row(record["question"], record["answer"], split, len(rows), where=where))
    return rows


def _load_hub(split: str) -> Iterable[dict[str, Any]]:
    try:
        import datasets
    except ImportError as exc:
        raise DataError(
            "the `datasets` package is not installed: pass --input DIR with GSM8K's train.jsonl and test.jsonl "
            "(or pip install datasets)"
        ) from exc
    try:
        return datasets.load_dataset("openai/gsm8k", "main", split=split)
    except Exception as exc:  # offline, hub errors
        raise DataError(
            f"cannot load openai/gsm8k ({type(exc).__name__}: {exc}); pass --input DIR with GSM8K's "
            "train.jsonl and test.jsonl"
        ) from exc


def prepare_gsm8k(input_dir: str | None, local_dir: str) -> dict[str, str]:
    """Write ``train.parquet`` and ``test.parquet`` in verl's GSM8K schema to ``local_dir``.

    Args:
        input_dir: a folder with ``train.jsonl`` and ``test.jsonl`` (``{"question", "answer"}`` per line);
            ``None`` downloads ``openai/gsm8k`` (config ``main``) with the ``datasets`` library.
        local_dir: the output folder (created if needed).

    Returns:
        ``{"train": path, "test": path}`` of the written files.

    Each row is ``{data_source: "openai/gsm8k", prompt: [{role: user, content: question + instruction}],
    ability: "math", reward_model: {style: rule, ground_truth}, extra_info: {split, index, answer,
    question}}`` where ``ground_truth`` is the number after ``####`` with commas removed.
    """
    splits: dict[str, list[dict[str, Any]]] = {}
    for split in SPLITS:
        if input_dir is not None:
            splits[split] = _read_jsonl(Path(input_dir).expanduser() / f"{split}.jsonl", split)
        else:
            splits[split] = [
                make_row(r["question"], r["answer"], split, i, where=f"openai/gsm8k {split}, row {i}")
                for i, r in enumerate(_load_hub(split))
            ]
    return write_splits(splits, local_dir)


def write_splits(splits: dict[str, list[dict[str, Any]]], local_dir: str) -> dict[str, str]:
    """Write each split's rows as ``{local_dir}/{split}.parquet`` (the folder is created if needed); returns
    ``{split: path}`` of the written files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(local_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for split, rows in splits.items():
        path = out / f"{split}.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
        written[split] = str(path)
    return written
