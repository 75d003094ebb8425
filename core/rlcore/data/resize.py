"""verl's image resize before the processor (``data.image_patch_size``): the "smart resize" of ``qwen_vl_utils``.

verl hands each image (and each video's frames) to ``qwen_vl_utils``, which resizes it so that both sides are
multiples of a factor (the patch size × the spatial merge size, 2 for Qwen2-VL-style models), the number of
pixels lies within bounds given in tokens of that factor (images: 4 to 16384; video frames: 128 to 768, and at
most a total budget spread over the frames), and the aspect ratio stays as close as it can. Only then does the
processor see the image. rlcore does the same when ``data.image_patch_size`` is set (null: the images go to the
processor as they are, which resizes them with its own patch size and pixel bounds).

An image entry given as an object may carry verl's per-image keys ``min_pixels``/``max_pixels`` (bounds of
its own) or ``resized_height``/``resized_width`` (the size wanted, rounded to the factor), as in verl.

Nothing here imports PIL at module import time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rlcore.data import DataError

#: the spatial merge size qwen_vl_utils assumes when the processor names none
DEFAULT_MERGE_SIZE = 2
#: an image's pixel bounds, in tokens of factor × factor pixels
IMAGE_MIN_TOKENS, IMAGE_MAX_TOKENS = 4, 16384
#: a video frame's pixel bounds, in tokens of factor × factor pixels
VIDEO_MIN_TOKENS, VIDEO_MAX_TOKENS = 128, 768
#: the tokens all frames of a video may hold together (qwen_vl_utils' default model length × 0.9)
VIDEO_TOTAL_TOKENS = 128000 * 0.9
#: frames are counted in pairs (the temporal patch) when the budget is spread over them
FRAME_FACTOR = 2
#: the largest aspect ratio the resize accepts
MAX_RATIO = 200
#: the per-image keys of an image object that steer its resize
IMAGE_SIZE_KEYS = ("min_pixels", "max_pixels", "resized_height", "resized_width")


def smart_resize(height: int, width: int, factor: int, min_pixels: float, max_pixels: float) -> tuple[int, int]:
    """The ``(height, width)`` an image of ``height`` × ``width`` is resized to: both multiples of ``factor``
    (at least ``factor``), their product within ``[min_pixels, max_pixels]`` where the rounding allows, the
    aspect ratio kept as closely as it can. Raises :class:`DataError` for an aspect ratio above 200, bounds
    the wrong way round, or a side that shrinking to ``max_pixels`` would round to 0."""
    if max_pixels < min_pixels:
        raise DataError(f"the image's max_pixels ({max_pixels}) is smaller than its min_pixels ({min_pixels})")
    if min(height, width) <= 0 or max(height, width) / min(height, width) > MAX_RATIO:
        raise DataError(f"an image of {width}x{height} pixels: its aspect ratio must be below {MAX_RATIO}")
    new_height = max(factor, round(height / factor) * factor)
    new_width = max(factor, round(width / factor) * factor)
    if new_height * new_width > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        new_height = math.floor(height / beta / factor) * factor
        new_width = math.floor(width / beta / factor) * factor
        if not new_height or not new_width:
            raise DataError(
                f"an image of {width}x{height} pixels cannot keep its aspect ratio within max_pixels={max_pixels} "
                f"with both sides multiples of {factor}"
            )
    elif new_height * new_width < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        new_height = math.ceil(height * beta / factor) * factor
        new_width = math.ceil(width * beta / factor) * factor
    return new_height, new_width


def resize_factor(processor: Any, patch_size: int) -> int:
    """The factor sides are made multiples of: ``patch_size`` × the processor's ``merge_size`` (2 if none)."""
    merge = getattr(getattr(processor, "image_processor", None), "merge_size", None) or DEFAULT_MERGE_SIZE
    return int(patch_size) * int(merge)


def _pixel_bound(options: Mapping[str, Any], name: str, default: float, what: str) -> float:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise DataError(f"{what}: {name} must be a positive number of pixels, got {value!r}")
    return value


def resize_image(image: Any, factor: int, what: str, options: Mapping[str, Any] | None = None) -> Any:
    """``image`` (a ``PIL.Image``) resized the way verl does before the processor: :func:`smart_resize` with
    ``factor`` and an image's bounds (4 to 16384 tokens of ``factor``²), or those of ``options`` (the image
    object's ``min_pixels``/``max_pixels``, or ``resized_height``/``resized_width``). ``what`` names the row,
    key and index in errors."""
    options = options or {}
    low: float
    high: float
    if "resized_height" in options and "resized_width" in options:
        height = int(_pixel_bound(options, "resized_height", 0, what))
        width = int(_pixel_bound(options, "resized_width", 0, what))
        low, high = IMAGE_MIN_TOKENS * factor**2, IMAGE_MAX_TOKENS * factor**2
    else:
        width, height = image.size
        low = _pixel_bound(options, "min_pixels", IMAGE_MIN_TOKENS * factor**2, what)
        high = _pixel_bound(options, "max_pixels", IMAGE_MAX_TOKENS * factor**2, what)
    try:
        new_height, new_width = smart_resize(height, width, factor, low, high)
    except DataError as exc:
        raise DataError(f"{what}: {exc}") from exc
    return image.resize((new_width, new_height))


def resize_frames(frames: Sequence[Any], factor: int, what: str, listed: bool) -> list[Any]:
    """A video's ``frames`` (``PIL.Image`` objects of one size) resized the way verl resizes a video: one size
    for all, from :func:`smart_resize` with ``factor`` and a frame's bounds (128 to 768 tokens, and at most the
    total budget spread over the frames, counted in pairs). A video given as a list of frames (``listed``) has
    each frame through :func:`resize_image` first, with twice the factor, as ``qwen_vl_utils`` does (it passes
    the factor on as the patch size); a decoded video file does not."""
    if listed:
        frames = [resize_image(frame, factor * DEFAULT_MERGE_SIZE, what) for frame in frames]
    width, height = frames[0].size
    frame_count = math.ceil(len(frames) / FRAME_FACTOR) * FRAME_FACTOR
    low = VIDEO_MIN_TOKENS * factor**2
    budget = VIDEO_TOTAL_TOKENS * factor**2 / frame_count * FRAME_FACTOR
    high = max(min(VIDEO_MAX_TOKENS * factor**2, budget), int(low * 1.05))
    try:
        new_height, new_width = smart_resize(height, width, factor, low, high)
    except DataError as exc:
        raise DataError(f"{what}: {exc}") from exc
    return [frame.resize((new_width, new_height)) for frame in frames]


def listed_frames(entry: Any) -> bool:
    """Whether a video entry is a list of frames (an object's ``frames``/``video`` may hold one), not a file."""
    if isinstance(entry, Mapping):
        inner = next((entry[name] for name in ("frames", "video", "path") if entry.get(name) is not None), None)
        return listed_frames(inner)
    return isinstance(entry, Sequence) and not isinstance(entry, (str, bytes, bytearray))


def size_options(entry: Any) -> dict[str, Any]:
    """The resize keys (:data:`IMAGE_SIZE_KEYS`) an image entry carries: those of an image object, else none."""
    if not isinstance(entry, Mapping):
        return {}
    return {name: entry[name] for name in IMAGE_SIZE_KEYS if entry.get(name) is not None}
