"""The dry run's image and video check: do the data files have images or videos, and does the model have a
processor for them?"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlcore.data import DataError
from rlcore.data.files import folder_files
from rlcore.data.multimodal import VIDEO_PLACEHOLDER, describe_processor
from rlcore.data.resize import resize_factor

if TYPE_CHECKING:
    from rlcore.registry import Registry


def files_with_images(files: Any, key: str, split: str = "train", folders: bool = True) -> list[str]:
    """Those of ``files`` (a path or a list; ``None``: none) with images: a ``key`` column that is not all null
    (parquet) or non-empty in some record (jsonl/json). Files that do not exist are left to the dataset. With
    ``folders``, a folder stands for its data files (:func:`~rlcore.data.files.folder_files`, whose errors
    name the folder and ``split``'s key); without, folders are skipped (a custom dataset reads them)."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(files):
        files = OmegaConf.to_container(files, resolve=True)
    if files is None:
        return []
    paths: list[str] = []
    for entry in [files] if isinstance(files, (str, os.PathLike)) else list(files):
        entry = os.fspath(entry)
        is_folder = Path(entry).expanduser().is_dir()
        paths += folder_files(entry, split) if is_folder and folders else [entry]
    found = []
    for path in paths:
        if not Path(path).is_file():
            continue
        if Path(path).suffix.lower() == ".parquet":
            import pyarrow.parquet as pq

            try:
                column = pq.read_table(path, columns=[key]).column(0) if key in pq.read_schema(path).names else None
                has = column is not None and column.null_count < len(column)
            except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
                raise DataError(f"{path}: cannot read parquet file: {type(exc).__name__}: {exc}") from exc
        else:
            from rlcore.data.rl_dataset import read_rows  # imports torch: only for jsonl/json data

            has = any(isinstance(r, Mapping) and r.get(key) for r in read_rows(path)[0])
        if has:
            found.append(path)
    return found


def _builtin_dataset(config: Any, registry: Registry) -> bool:
    """Whether the run reads its data with the built-in dataset (which takes folders of data files), its
    ``data.dataset`` resolved in ``registry``."""
    from rlcore.registry import UnknownComponentError

    if config.data.custom_cls.path:
        return False
    try:
        component = registry.get("dataset", config.data.dataset)
    except UnknownComponentError:  # reported by the component check
        return False
    return component.target_path == "rlcore.data.rl_dataset:RLDataset"


def image_plan(config: Any, registry: Registry) -> str | None:
    """What a run does with images and videos, for ``rlcore run --dry-run``; ``None`` when no data file has
    either.

    A folder named by ``data.train_files``/``data.val_files`` that holds no data files (or files of several
    kinds or splits) is an error here, for the built-in dataset. When those files have a ``data.image_key``
    (or ``data.video_key``) column, a local ``actor_rollout_ref.model.path`` must have a multimodal processor
    (else :class:`DataError` naming the file, the key and the model); its class and pixel bounds are described,
    for videos how their frames are patched, and with ``data.image_patch_size`` verl's resize. Without the
    training stack (a lean ``pip install rlcore``: no pyarrow or torch to read the data with) nothing is checked:
    the dry run names the missing components instead.
    """
    from importlib.util import find_spec

    from rlcore.processors import load_processor

    if find_spec("pyarrow") is None or find_spec("torch") is None:
        return None
    data, model = config.data, config.actor_rollout_ref.model
    folders = _builtin_dataset(config, registry)
    found = {
        (key, what): files_with_images(data.train_files, key, "train", folders)
        + files_with_images(data.val_files, key, "val", folders)
        for key, what in ((data.image_key, "image"), (data.video_key, "video"))
    }
    found = {column: files for column, files in found.items() if files}
    if not found:
        return None
    if not Path(str(model.path)).expanduser().is_dir():
        (key, what), files = next(iter(found.items()))
        return f"{what}s: {files[0]} has column {key!r}; the processor of {model.path} is loaded when the run starts"
    processor = load_processor(Path(str(model.path)).expanduser(), trust_remote_code=bool(model.trust_remote_code))
    if processor is None:
        (key, what), files = next(iter(found.items()))
        raise DataError(
            f"{files[0]}: column {key!r} (data.{what}_key) holds {what}s but actor_rollout_ref.model.path={model.path} "
            "has no multimodal processor (preprocessor_config.json); use a vision-language model"
        )
    kinds = {what for _, what in found}
    lines = [describe_processor(processor)] if "image" in kinds else []
    if data.image_patch_size:
        factor = resize_factor(processor, data.image_patch_size)
        media = " and ".join(name for kind, name in (("image", "image"), ("video", "video frame")) if kind in kinds)
        lines.append(
            f"resize: each {media} first as verl does (data.image_patch_size={data.image_patch_size} x merge size "
            f"{factor // data.image_patch_size}: sides in multiples of {factor}, qwen_vl_utils' pixel bounds)"
        )
    if "video" in kinds:
        video_processor = getattr(processor, "video_processor", None)
        how = (
            f"{type(processor).__name__} / {type(video_processor).__name__}"
            if video_processor is not None
            else f"{type(processor).__name__}: each frame through {type(processor.image_processor).__name__}, "
            "grouped by its temporal_patch_size (no torchvision)"
        )
        lines.append(
            f"videos: {VIDEO_PLACEHOLDER} placeholders in the prompts are filled from data.video_key by {how}; "
            "their tokens count towards data.max_prompt_length"
        )
    return "\n".join(lines)
