"""Geometry3K preparation: ``{problem, answer, images}`` rows to verl-schema parquet (``rlcore data geo3k``).

The output is what verl's ``examples/data_preprocess/geo3k.py`` writes: the problem (which starts with an
``<image>`` placeholder) plus verl's instruction to think in ``<think>`` tags and box the answer, the images
as ``{"bytes", "path"}`` objects, ``data_source`` ``hiyouga/geometry3k`` (scored by
:mod:`rlcore_plugin_tasks.scorers.geo3k`) and ``reward_model.ground_truth`` the answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rlcore.api import DataError
from rlcore_plugin_tasks.prepare.gsm8k import SPLITS, write_splits

DATA_SOURCE = "hiyouga/geometry3k"
INSTRUCTION = (
    "You FIRST think about the reasoning process as an internal monologue and then provide the final answer. "
    "The reasoning process MUST BE enclosed within <think> </think> tags. "
    "The final answer MUST BE put in \\boxed{}."
)
INPUT_EXTENSIONS: tuple[str, ...] = (".parquet", ".jsonl", ".json")


def _image_entry(value: Any, where: str, base_dir: Path) -> dict[str, Any]:
    """One source image as ``{"bytes", "path"}``; a path (or ``{"path"}`` without bytes) is read into bytes
    so the output does not depend on the input folder."""
    from rlcore.api import load_image

    if isinstance(value, Mapping) and isinstance(value.get("bytes"), (bytes, bytearray)):
        load_image(value["bytes"], where)  # fails here, naming the row, when the bytes are not an image
        return {"bytes": bytes(value["bytes"]), "path": value.get("path")}
    path = value.get("path") if isinstance(value, Mapping) else value
    if not isinstance(path, str):
        raise DataError(f"{where}: an image must be {{'bytes': ...}}, {{'path': ...}} or a path, got {value!r:.80}")
    file = Path(path) if Path(path).is_absolute() else base_dir / path
    if not file.is_file():
        raise DataError(f"{where}: image file {file} does not exist")
    data = file.read_bytes()
    load_image(data, f"{where} ({file})")
    return {"bytes": data, "path": path}


def make_row(record: Any, split: str, index: int, *, where: str, base_dir: Path) -> dict[str, Any]:
    """One verl-schema row from a ``{problem, answer, images}`` record; errors name ``where`` and the key."""
    if not isinstance(record, Mapping):
        raise DataError(f"{where}: expected an object with keys 'problem', 'answer' and 'images'")
    for key in ("problem", "answer"):
        if not isinstance(record.get(key), str):
            raise DataError(f"{where}: missing string key {key!r}")
    images = record.get("images")
    if not isinstance(images, list) or not images:
        raise DataError(f"{where}: key 'images' must be a non-empty list of images, got {type(images).__name__}")
    problem, answer = record["problem"], record["answer"]
    entries = [_image_entry(image, f"{where}: key 'images'[{j}]", base_dir) for j, image in enumerate(images)]
    placeholders = problem.count("<image>")
    if placeholders != len(entries):
        raise DataError(
            f"{where}: key 'problem' has {placeholders} <image> placeholder(s) but key 'images' holds {len(entries)}"
        )
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{problem} {INSTRUCTION}"}],
        "images": entries,
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": problem},
    }


def split_files(input_dir: Path, split: str) -> list[Path]:
    """The files of ``split`` in ``input_dir``: ``<split>.parquet|.jsonl|.json`` or Hugging Face's
    ``data/<split>-*.parquet`` shards (a snapshot of ``hiyouga/geometry3k``)."""
    direct = [input_dir / f"{split}{ext}" for ext in INPUT_EXTENSIONS if (input_dir / f"{split}{ext}").is_file()]
    shards = sorted((input_dir / "data").glob(f"{split}-*.parquet")) if (input_dir / "data").is_dir() else []
    files = direct + shards
    if not files:
        raise DataError(
            f"{input_dir}: no geo3k {split} split (expected {split}.parquet, {split}.jsonl or data/{split}-*.parquet)"
        )
    return files


def _records(files: Iterable[Path]) -> Iterable[tuple[Any, str, Path]]:
    from rlcore.api import read_rows

    for file in files:
        records, origins = read_rows(str(file))
        for record, origin in zip(records, origins):
            yield record, str(origin), file.parent


def prepare_geo3k(input_dir: str, local_dir: str) -> dict[str, str]:
    """Write ``train.parquet`` and ``test.parquet`` in verl's geo3k schema to ``local_dir``.

    Args:
        input_dir: a folder with the source splits (see :func:`split_files`): rows ``{problem, answer, images}``
            where ``images`` is a list of ``{"bytes"}`` / ``{"path"}`` objects or paths (relative to the file).
        local_dir: the output folder (created if needed).

    Returns:
        ``{"train": path, "test": path}`` of the written files.
    """
    source = Path(input_dir).expanduser()
    if not source.is_dir():
        raise DataError(f"--input {input_dir}: not a folder")
    splits = {
        split: [
            make_row(record, split, i, where=where, base_dir=base)
            for i, (record, where, base) in enumerate(_records(split_files(source, split)))
        ]
        for split in SPLITS
    }
    return write_splits(splits, local_dir)
