"""Images and videos in prompt rows: verl's multimodal schema, read and rendered through the model's processor.

A multimodal row holds, next to its chat messages, an image column (``data.image_key``, default ``images``):
a list with one entry per ``<image>`` placeholder in the messages' text, in order. An entry is one of the
forms verl accepts: ``{"bytes": b"..."}`` (what Hugging Face datasets write for an ``Image`` feature, maybe
with a ``path`` too), ``{"path": "a.png"}``, ``{"image": <PIL image, path or bytes>}``, a path string (``file://``
allowed; a relative path is looked up from the working directory, then from the data file's folder), a
``data:image/...;base64,`` URI, or a ``PIL.Image``. Remote URLs are not fetched.

:func:`render_row` turns the messages into the content-parts form a multimodal chat template expects
(``<image>`` → ``{"type": "image"}``), renders it with the processor and tokenises it together with the
images, so the prompt ids hold the expanded image tokens (``<|image_pad|>`` × patches for Qwen2-VL).

Videos work the same way: a video column (``data.video_key``, default ``videos``) holds one entry per
``<video>`` placeholder (→ ``{"type": "video"}``), each a list of frames (image entries as above, all of one
size), a path to a local video file (decoded with OpenCV), or ``{"path": ...}`` / ``{"video": ...}`` /
``{"frames": [...]}`` holding one of those. The processor's ``pixel_values_videos`` and ``video_grid_thw``
join the row's ``multi_modal_inputs``.

Nothing here imports torch, PIL or transformers at module import time.
"""

from __future__ import annotations

import base64
import io
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcore.data import DataError, resize

IMAGE_PLACEHOLDER = "<image>"
VIDEO_PLACEHOLDER = "<video>"
#: the column verl reads videos from (``data.video_key``'s default)
VIDEO_COLUMN = "videos"
#: the per-sample non-tensor Batch fields of image rows: the images (rollout) and the processor's tensors (training)
MULTI_MODAL_DATA = "multi_modal_data"
#: the per-sample non-tensor Batch field of image rows that holds the processor's tensors (pixel values, grid sizes)
MULTI_MODAL_INPUTS = "multi_modal_inputs"
#: the processor outputs carried in ``multi_modal_inputs`` (the prompt's ids and mask are the Batch's own)
MULTI_MODAL_INPUT_KEYS: tuple[str, ...] = ("pixel_values", "image_grid_thw")
#: the processor outputs of a row's videos, carried in ``multi_modal_inputs`` next to the images'
VIDEO_INPUT_KEYS: tuple[str, ...] = ("pixel_values_videos", "video_grid_thw")
_PLACEHOLDERS = re.compile(f"({re.escape(IMAGE_PLACEHOLDER)}|{re.escape(VIDEO_PLACEHOLDER)})")
_DATA_URI = re.compile(r"data:image/[\w.+-]+;base64,", re.IGNORECASE)


@dataclass(frozen=True)
class RenderedRow:
    """One image or video row rendered by the processor: its prompt ids (image and video tokens expanded), its
    images, its videos (lists of frames) and the processor's tensors for them (``pixel_values``,
    ``image_grid_thw``, ``pixel_values_videos``, ``video_grid_thw``: those of what the row has)."""

    input_ids: list[int]
    images: list[Any]
    inputs: dict[str, Any]
    videos: list[list[Any]] = field(default_factory=list)


def media_data(row: RenderedRow) -> dict[str, Any]:
    """A rendered row's ``multi_modal_data`` (what a rollout engine that takes raw media reads):
    ``{"image": [PIL images]}`` and/or ``{"video": [lists of PIL frames]}``, for what the row has."""
    data: dict[str, Any] = {}
    if row.images or not row.videos:
        data["image"] = row.images
    if row.videos:
        data["video"] = row.videos
    return data


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


def image_list(value: Any, where: str, key: str, what: str = "image") -> list[Any]:
    """The entries of a row's ``key`` column (``None`` or missing: none); a non-list raises. ``what`` is
    ``image`` (``data.image_key``) or ``video`` (``data.video_key``)."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise DataError(
            f"{where}: key {key!r} (data.{what}_key) must be a list of {what}s (one per <{what}>), "
            f"got {type(value).__name__}"
        )
    return list(value)


def image_messages(
    messages: Sequence[Mapping[str, Any]],
    n_images: int,
    where: str,
    key: str,
    n_videos: int = 0,
    video_key: str = VIDEO_COLUMN,
) -> list[dict]:
    """``messages`` with each ``<image>`` placeholder turned into a ``{"type": "image"}`` content part and
    each ``<video>`` into a ``{"type": "video"}`` one.

    A message without placeholders keeps its string content. The number of ``<image>`` placeholders must
    equal ``n_images`` (the images of column ``key``), that of ``<video>`` ones ``n_videos`` (``video_key``).
    """
    out = []
    counts = {IMAGE_PLACEHOLDER: 0, VIDEO_PLACEHOLDER: 0}
    for message in messages:
        content = message["content"]
        if IMAGE_PLACEHOLDER not in content and VIDEO_PLACEHOLDER not in content:
            out.append(dict(message))
            continue
        parts: list[dict[str, Any]] = []
        for segment in _PLACEHOLDERS.split(content):
            if segment in counts:
                parts.append({"type": segment.strip("<>")})
                counts[segment] += 1
            elif segment:
                parts.append({"type": "text", "text": segment})
        out.append({**message, "content": parts})
    for placeholder, given, column in ((IMAGE_PLACEHOLDER, n_images, key), (VIDEO_PLACEHOLDER, n_videos, video_key)):
        if counts[placeholder] != given:
            noun = placeholder.strip("<>")
            raise DataError(
                f"{where}: the prompt has {counts[placeholder]} {placeholder} placeholder(s) but key {column!r} holds "
                f"{given} {noun}(s); each {noun} needs exactly one placeholder, in order"
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


def _video_file_frames(path: str, what: str, base_dir: Path | None) -> list[Any]:
    """The frames of a local video file, decoded with OpenCV, as RGB ``PIL.Image`` objects."""
    if "://" in path and not path.startswith("file://"):
        raise DataError(f"{what}: {path!r} is a URL; rlcore does not download videos (store frames or a local path)")
    plain = Path(path.removeprefix("file://")).expanduser()
    candidates = [plain] + ([base_dir / plain] if base_dir is not None and not plain.is_absolute() else [])
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise DataError(f"{what}: video file {' or '.join(str(c) for c in candidates)} does not exist")
    try:
        import cv2
    except ImportError as exc:
        raise DataError(
            f"{what}: decoding the video file {found} needs OpenCV (pip install opencv-python-headless), or store "
            "the video as a list of frames"
        ) from exc
    from PIL import Image

    capture = cv2.VideoCapture(str(found))
    frames = []
    try:
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            frames.append(Image.fromarray(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)))
    finally:
        capture.release()
    if not frames:
        raise DataError(f"{what}: video file {found} has no frames OpenCV can decode")
    return frames


def load_video(value: Any, what: str, base_dir: Path | None = None) -> list[Any]:
    """One video entry as its list of RGB ``PIL.Image`` frames: a list of image entries (any form
    :func:`load_image` takes), a path to a local video file, or ``{"frames"|"video"|"path": ...}`` holding one.

    ``what`` names the row, key and index in errors: a missing or undecodable file, a URL, frames of different
    sizes, no frames, or a value of another type.
    """
    if isinstance(value, Mapping):
        inner = next((value[name] for name in ("frames", "video", "path") if value.get(name) is not None), None)
        if inner is None:
            raise DataError(f"{what}: a video object needs 'frames', 'video' or 'path' (it has {sorted(value)})")
        return load_video(inner, what, base_dir)
    if isinstance(value, (str, os.PathLike)):
        return _video_file_frames(os.fspath(value), what, base_dir)
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, Sequence):
        raise DataError(
            f"{what}: a video must be a list of frames, a local video file's path or an object holding one, "
            f"got {type(value).__name__}"
        )
    frames = [load_image(frame, f"{what}[frame {j}]", base_dir) for j, frame in enumerate(value)]
    if not frames:
        raise DataError(f"{what}: the video has no frames")
    sizes = sorted({frame.size for frame in frames})
    if len(sizes) > 1:
        raise DataError(f"{what}: the video's frames differ in size ({', '.join(f'{w}x{h}' for w, h in sizes)})")
    return frames


def render_row(
    processor: Any,
    messages: Sequence[Mapping[str, Any]],
    images: Sequence[Any],
    *,
    where: str,
    key: str,
    base_dir: Path | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    videos: Sequence[Any] = (),
    video_key: str = VIDEO_COLUMN,
    image_patch_size: int | None = None,
) -> RenderedRow:
    """Render and tokenise one image or video row with ``processor``.

    The messages get ``{"type": "image"}`` and ``{"type": "video"}`` parts (:func:`image_messages`), the
    processor's chat template renders them (``add_generation_prompt=True``), and the processor tokenises the
    text with the images (loaded with :func:`load_image`) and the videos (:func:`load_video`). Errors name
    ``where`` (file and row) and the ``key`` (or ``video_key``). With ``image_patch_size`` (verl's
    ``data.image_patch_size``) the images and videos are resized first, as verl does (:mod:`rlcore.data.resize`).
    """
    parts = image_messages(messages, len(images), where, key, len(videos), video_key)
    loaded = [load_image(image, f"{where}: key {key!r}[{j}]", base_dir) for j, image in enumerate(images)]
    clips = [load_video(video, f"{where}: key {video_key!r}[{j}]", base_dir) for j, video in enumerate(videos)]
    if image_patch_size:
        factor = resize.resize_factor(processor, image_patch_size)
        loaded = [
            resize.resize_image(image, factor, f"{where}: key {key!r}[{j}]", resize.size_options(images[j]))
            for j, image in enumerate(loaded)
        ]
        clips = [
            resize.resize_frames(clip, factor, f"{where}: key {video_key!r}[{j}]", resize.listed_frames(videos[j]))
            for j, clip in enumerate(clips)
        ]
    try:
        text = processor.apply_chat_template(
            parts, add_generation_prompt=True, tokenize=False, **dict(chat_template_kwargs or {})
        )
    except Exception as exc:  # jinja errors, missing template
        raise DataError(f"{where}: the processor's chat template failed: {type(exc).__name__}: {exc}") from exc
    keys = (MULTI_MODAL_INPUT_KEYS if loaded else ()) + (VIDEO_INPUT_KEYS if clips else ())
    try:
        encoded = processor(text=[text], images=loaded or None, videos=clips or None, return_tensors="pt")
    except Exception as exc:  # image too small, token count mismatch, ...
        failed = key if loaded or not clips else video_key
        raise DataError(f"{where}: the processor failed on key {failed!r}: {type(exc).__name__}: {exc}") from exc
    missing = [name for name in keys if name not in encoded]
    if missing:
        raise DataError(
            f"{where}: {type(processor).__name__} returned no {', '.join(missing)}; rlcore supports Qwen2-VL-style "
            "processors (pixel_values and image_grid_thw; pixel_values_videos and video_grid_thw)"
        )
    return RenderedRow(
        input_ids=[int(i) for i in encoded["input_ids"][0].tolist()],
        images=loaded,
        inputs={name: encoded[name] for name in keys},
        videos=clips,
    )
