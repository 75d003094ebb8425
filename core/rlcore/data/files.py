"""The data files a ``data.train_files`` / ``data.val_files`` value names: paths, lists of paths, and folders.

A folder stands for the data files directly inside it, in sorted order, as a folder of parquet shards does
for verl and Hugging Face ``datasets`` users. Its files must be of one kind (``.parquet``, ``.jsonl`` or
``.json``); files whose names start with ``.`` or ``_`` (``_SUCCESS``, ``.crc`` files of Spark and Hadoop)
and files of other types (a ``README.md``) are left out. A folder with no data file, with data files of
several kinds, or with files of several splits (``train.parquet`` next to ``test.parquet``: a dataset
folder, not one split of it) is refused with a message that says it is a folder and what it holds.

This module imports neither torch nor pyarrow, so the dry run can use it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlcore.data import DataError

PARQUET_EXTENSIONS: tuple[str, ...] = (".parquet",)
JSON_EXTENSIONS: tuple[str, ...] = (".jsonl", ".json")
DATA_EXTENSIONS: tuple[str, ...] = PARQUET_EXTENSIONS + JSON_EXTENSIONS
#: file-name words that name a split (a folder holding two of them holds a whole dataset)
_SPLITS = {
    "train": "train",
    "training": "train",
    "test": "test",
    "testing": "test",
    "val": "validation",
    "valid": "validation",
    "validation": "validation",
    "dev": "validation",
    "eval": "validation",
}
_WORD = re.compile(r"[A-Za-z]+")


def files_key(split: str) -> str:
    """The config key that names the files of ``split``: ``data.train_files`` or ``data.val_files``."""
    return "data.train_files" if split == "train" else "data.val_files"


def normalize_files(files: Any, split: str) -> list[str]:
    """Turn ``files`` (a path or a list of paths; folders expanded by :func:`folder_files`) into a non-empty
    list of path strings."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(files):
        files = OmegaConf.to_container(files, resolve=True)
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    if not isinstance(files, Sequence) or not files:
        raise DataError(
            f"{split} data files ({files_key(split)}): expected a path or a non-empty list of paths, got {files!r}"
        )
    paths: list[str] = []
    for entry in files:
        path = os.fspath(entry)
        paths += folder_files(path, split) if Path(path).expanduser().is_dir() else [path]
    return paths


def _split_of(name: str) -> str | None:
    """The split a file name names (``train-00000-of-00002.parquet`` → ``train``), if any."""
    words = {_SPLITS[w.lower()] for w in _WORD.findall(Path(name).stem) if w.lower() in _SPLITS}
    return words.pop() if len(words) == 1 else None


def _describe(names: list[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def folder_files(folder: str, split: str) -> list[str]:
    """The data files directly inside ``folder`` (see the module docstring), sorted; a :class:`DataError`
    names the key, the folder and what it holds when it cannot stand for one split's data."""
    root = Path(folder).expanduser()
    key = files_key(split)
    try:
        entries = sorted(root.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        raise DataError(f"{key}={folder} is a folder that cannot be listed ({exc.strerror or exc})") from exc
    visible = [p for p in entries if not p.name.startswith((".", "_"))]
    data = [p for p in visible if p.is_file() and p.suffix.lower() in DATA_EXTENSIONS]
    if not data:
        held = [p.name + ("/" if p.is_dir() else "") for p in visible]
        holds = f"it holds {_describe(held)}" if held else "it is empty"
        raise DataError(
            f"{key}={folder} is a folder without data files ({', '.join(DATA_EXTENSIONS)} directly inside it): "
            f"{holds}; name the files, or a folder of them"
        )
    kinds = sorted({p.suffix.lower() for p in data})
    if len(kinds) > 1:
        counts = ", ".join(f"{sum(p.suffix.lower() == k for p in data)} {k}" for k in kinds)
        raise DataError(
            f"{key}={folder} is a folder with data files of {len(kinds)} kinds ({counts}: "
            f"{_describe([p.name for p in data])}); a folder must hold one kind: name the files instead"
        )
    splits = sorted({s for s in (_split_of(p.name) for p in data) if s})
    if len(splits) > 1:
        raise DataError(
            f"{key}={folder} is a folder holding the files of {len(splits)} splits ({', '.join(splits)}: "
            f"{_describe([p.name for p in data])}); name this split's files, e.g. {key}={root / data[0].name}"
        )
    return [str(p) for p in data]
