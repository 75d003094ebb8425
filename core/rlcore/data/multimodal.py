"""Images in prompt rows: verl's multimodal schema, read and rendered through the model's processor.

A multimodal row holds, next to its chat messages, an image column (``data.image_key``, default ``images``):
a list with one entry per ``<image>`` placeholder in the messages' text, in order. An entry is one of the
forms verl accepts: ``{"bytes": b"..."}`` (what Hugging Face datasets write for an ``Image`` feature, maybe
with a ``path`` too), ``{"path": "a.png"}``, ``{"image": <PIL image, path or bytes>}``, a path string (``file://``
allowed; a relative path is looked up from the working directory, then from the data file's folder), a
``data:image/...;base64,`` URI, or a ``PIL.Image``. Remote URLs are not fetched.

:func:`render_row` turns the messages into the content-parts form a multimodal chat template expects
(``<image>`` → ``{"type": "image"}``), renders it with the processor and tokenises it together with the
images, so the prompt ids hold the expanded image tokens (``<|image_pad|>`` × patches for Qwen2-VL). Video
(a ``videos`` column, ``<video>`` placeholders) is not supported yet and is rejected naming the row.

Nothing here imports torch, PIL or transformers at module import time.
"""

from __future__ import annotations

import base64
import io
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcore.data import DataError

IMAGE_PLACEHOLDER = "<image>"
VIDEO_PLACEHOLDER = "<video>"
#: the column verl reads videos from (``data.video_key``'s default); rlcore rejects rows that use it
VIDEO_COLUMN = "videos"
#: the per-sample non-tensor Batch fields of image rows: the images (rollout) and the processor's tensors (training)
MULTI_MODAL_DATA = "multi_modal_data"
#: the per-sample non-tensor Batch field of image rows that holds the processor's tensors (pixel values, grid sizes)
MULTI_MODAL_INPUTS = "multi_modal_inputs"
#: the processor outputs carried in ``multi_modal_inputs`` (the prompt's ids and mask are the Batch's own)
MULTI_MODAL_INPUT_KEYS: tuple[str, ...] = ("pixel_values", "image_grid_thw")
_PLACEHOLDERS = re.compile(f"({re.escape(IMAGE_PLACEHOLDER)}|{re.escape(VIDEO_PLACEHOLDER)})")
_DATA_URI = re.compile(r"data:image/[\w.+-]+;base64,", re.IGNORECASE)


@dataclass(frozen=True)
class RenderedRow:
    """One image row rendered by the processor: its prompt ids (image tokens expanded), its images and the
    processor's tensors for them (``pixel_values``, ``image_grid_thw``)."""

    input_ids: list[int]
    images: list[Any]
    inputs: dict[str, Any]


def describe_processor(processor: Any) -> str:
    """One line on what a run does with images: the processor class and its pixel bounds per image."""
    image_processor = processor.image_processor
    size = getattr(image_processor, "size", None)
    values = {
        "min_pixels": getattr(image_processor, "min_pixels", None) or getattr(size, "shortest_edge", None),
        "max_pixels": getattr(image_processor, "max_pixels", None) or getattr(size, "longest_edge", None),
        "patch_size": getattr(image_processor, "patch_size", None),
        "merge_size": getattr(image_processor, "merge_size", None),
    }
    bounds = [f"{name}={value}" for name, value in values.items() if value is not None]
    detail = f" ({', '.join(bounds)})" if bounds else ""
    return (
        f"images: {IMAGE_PLACEHOLDER} placeholders in the prompts are filled from data.image_key by "
        f"{type(processor).__name__} / {type(image_processor).__name__}{detail}; their tokens count towards "
        "data.max_prompt_length"
    )


def check_no_videos(record: Mapping[str, Any], where: str) -> None:
    """Reject a row that asks for video input (a non-empty ``videos`` column)."""
    if record.get(VIDEO_COLUMN):
        raise DataError(
            f"{where}: key {VIDEO_COLUMN!r} holds videos; rlcore does not support video input yet (images only)"
        )


def image_list(value: Any, where: str, key: str) -> list[Any]:
    """The image entries of a row's ``key`` column (``None`` or missing: none); a non-list raises."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise DataError(
            f"{where}: key {key!r} (data.image_key) must be a list of images (one per {IMAGE_PLACEHOLDER}), "
            f"got {type(value).__name__}"
        )
    return list(value)


def image_messages(messages: Sequence[Mapping[str, Any]], n_images: int, where: str, key: str) -> list[dict]:
    """``messages`` with each ``<image>`` placeholder turned into a ``{"type": "image"}`` content part.

    A message without placeholders keeps its string content. The number of placeholders must equal
    ``n_images``; a ``<video>`` placeholder raises (video is not supported).
    """
    out = []
    count = 0
    for message in messages:
        content = message["content"]
        if IMAGE_PLACEHOLDER not in content and VIDEO_PLACEHOLDER not in content:
            out.append(dict(message))
            continue
        parts: list[dict[str, Any]] = []
        for segment in _PLACEHOLDERS.split(content):
            if segment == IMAGE_PLACEHOLDER:
                parts.append({"type": "image"})
                count += 1
            elif segment == VIDEO_PLACEHOLDER:
                raise DataError(
                    f"{where}: the prompt has a {VIDEO_PLACEHOLDER} placeholder; rlcore does not support video"
                )
            elif segment:
                parts.append({"type": "text", "text": segment})
        out.append({**message, "content": parts})
    if count != n_images:
        raise DataError(
            f"{where}: the prompt has {count} {IMAGE_PLACEHOLDER} placeholder(s) but key {key!r} holds {n_images} "
            f"image(s); each image needs exactly one placeholder, in order"
        )
    return out


def _open_bytes(data: bytes, what: str) -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
        return image.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise DataError(f"{what}: the bytes are not a readable image ({type(exc).__name__}: {exc})") from exc


def _open_path(path: str, what: str, base_dir: Path | None) -> Any:
    if "://" in path and not path.startswith("file://"):
        raise DataError(f"{what}: {path!r} is a URL; rlcore does not download images (store bytes or a local path)")
    plain = Path(path.removeprefix("file://")).expanduser()
    candidates = [plain]
    if base_dir is not None and not plain.is_absolute():
        candidates.append(base_dir / plain)
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        tried = " or ".join(str(c) for c in candidates)
        raise DataError(f"{what}: image file {tried} does not exist")
    try:
        data = found.read_bytes()
    except OSError as exc:
        raise DataError(f"{what}: cannot read image file {found}: {exc}") from exc
    return _open_bytes(data, f"{what} ({found})")


def load_image(value: Any, what: str, base_dir: Path | None = None) -> Any:
    """One image entry (any form the module docstring lists) as an RGB ``PIL.Image``.

    ``what`` names the row, key and index in errors: a missing file, unreadable bytes, a URL, a dict with
    none of ``bytes``/``path``/``image``, or a value of another type.
    """
    from PIL import Image

    if isinstance(value, Image.Image):
        return value.convert("RGB")
    if isinstance(value, (bytes, bytearray)):
        return _open_bytes(bytes(value), what)
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        match = _DATA_URI.match(text)
        if match:
            try:
                data = base64.b64decode(text[match.end() :], validate=True)
            except ValueError as exc:
                raise DataError(f"{what}: invalid base64 image data URI ({exc})") from exc
            return _open_bytes(data, what)
        return _open_path(text, what, base_dir)
    if isinstance(value, Mapping):
        if value.get("bytes") is not None:
            return load_image(value["bytes"], what, base_dir)
        if value.get("image") is not None:
            return load_image(value["image"], what, base_dir)
        if value.get("path") is not None:
            return load_image(str(value["path"]), what, base_dir)
        raise DataError(f"{what}: an image object needs 'bytes', 'path' or 'image' (it has {sorted(value)})")
    raise DataError(
        f"{what}: an image must be an object with 'bytes'/'path'/'image', a path or a PIL image, "
        f"got {type(value).__name__}"
    )


def render_row(
    processor: Any,
    messages: Sequence[Mapping[str, Any]],
    images: Sequence[Any],
    *,
    where: str,
    key: str,
    base_dir: Path | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> RenderedRow:
    """Render and tokenise one image row with ``processor``.

    The messages get ``{"type": "image"}`` parts (:func:`image_messages`), the processor's chat template
    renders them (``add_generation_prompt=True``), and the processor tokenises the text with the images
    (loaded with :func:`load_image`). Errors name ``where`` (file and row) and the ``key``.
    """
    parts = image_messages(messages, len(images), where, key)
    loaded = [load_image(image, f"{where}: key {key!r}[{j}]", base_dir) for j, image in enumerate(images)]
    try:
        text = processor.apply_chat_template(
            parts, add_generation_prompt=True, tokenize=False, **dict(chat_template_kwargs or {})
        )
    except Exception as exc:  # jinja errors, missing template
        raise DataError(f"{where}: the processor's chat template failed: {type(exc).__name__}: {exc}") from exc
    try:
        encoded = processor(text=[text], images=loaded, return_tensors="pt")
    except Exception as exc:  # image too small, token count mismatch, ...
        raise DataError(f"{where}: the processor failed on key {key!r}: {type(exc).__name__}: {exc}") from exc
    missing = [name for name in MULTI_MODAL_INPUT_KEYS if name not in encoded]
    if missing:
        raise DataError(
            f"{where}: {type(processor).__name__} returned no {', '.join(missing)}; rlcore supports Qwen2-VL-style "
            "processors (pixel_values and image_grid_thw)"
        )
    return RenderedRow(
        input_ids=[int(i) for i in encoded["input_ids"][0].tolist()],
        images=loaded,
        inputs={name: encoded[name] for name in MULTI_MODAL_INPUT_KEYS},
    )
