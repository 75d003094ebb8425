"""Load a model's multimodal processor (``AutoProcessor``), also where torchvision is absent.

transformers' ``Qwen2VLProcessor`` always wants a video processor, and Qwen2-VL's video processor needs
torchvision, which the CPU torch here cannot use. :func:`load_processor` therefore builds the same
processor without transformers' video processor when torchvision is missing: images work the same, and
videos (each a list of frames) go through :func:`frames_video_inputs`, Qwen2-VL's video patching over the
model's own (PIL) image processor.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlcore.errors import RLCoreError

#: ``model_type`` values whose processor is a ``Qwen2VLProcessor`` (Qwen2.5-VL's subclasses it).
QWEN2_VL_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl")


def frames_video_inputs(image_processor: Any, videos: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """Qwen2-VL's video inputs of ``videos`` (each a list of PIL frames of one size) without torchvision:
    ``pixel_values_videos`` ``[patches, C·t·p·p]`` and ``video_grid_thw`` ``[videos, 3]`` (numpy arrays).

    Each frame is resized, rescaled and normalised by ``image_processor`` (the model's Qwen2-VL image
    processor, so its pixel bounds apply); consecutive frames are grouped by its ``temporal_patch_size`` (the
    last frame repeated to fill the last group) and patched in the layout of transformers'
    ``Qwen2VLVideoProcessor`` (time, then the merged spatial blocks; each patch's channels, frames, rows and
    columns).

    Raises:
        ValueError: a video without frames, or whose frames differ in size.
    """
    import numpy as np

    temporal = int(image_processor.temporal_patch_size)
    patch = int(image_processor.patch_size)
    pixels, grids = [], []
    for index, frames in enumerate(videos):
        if not frames:
            raise ValueError(f"video {index} has no frames")
        per_frame, grid = [], None
        for frame in frames:
            out = image_processor(images=[frame], return_tensors="np")
            if grid is not None and list(out["image_grid_thw"][0]) != grid:
                raise ValueError(f"video {index}: its frames differ in size")
            grid = list(out["image_grid_thw"][0])
            values = np.asarray(out["pixel_values"])
            per_frame.append(values.reshape(values.shape[0], -1, temporal, patch, patch)[:, :, 0])
        per_frame += [per_frame[-1]] * (-len(per_frame) % temporal)
        groups = [np.stack(per_frame[start : start + temporal], axis=2) for start in range(0, len(per_frame), temporal)]
        pixels.append(np.concatenate([group.reshape(group.shape[0], -1) for group in groups]))
        assert grid is not None
        grids.append([len(groups), int(grid[1]), int(grid[2])])
    return {"pixel_values_videos": np.concatenate(pixels), "video_grid_thw": np.asarray(grids, dtype=np.int64)}


def _expand_video_tokens(text: Any, grids: Any, merge_length: int, token: str) -> list[str]:
    """``text`` (a string or a list) with its n-th ``token`` repeated once per merged patch of video n."""
    texts = [text] if isinstance(text, str) else list(text)
    counts = iter(int(count) for count in (grids.prod(-1) // merge_length))
    marker = "\x00rlcore-video\x00"
    expanded = []
    for line in texts:
        while token in line:
            count = next(counts, None)
            if count is None:
                raise ValueError(f"the text has more {token} placeholders than videos")
            line = line.replace(token, marker * count, 1)
        expanded.append(line.replace(marker, token))
    if next(counts, None) is not None:
        raise ValueError(f"the text has fewer {token} placeholders than videos")
    return expanded


def _torchvision_free_class():
    from transformers import Qwen2VLProcessor

    class TorchvisionFreeQwen2VLProcessor(Qwen2VLProcessor):
        """``Qwen2VLProcessor`` without transformers' video processor (no torchvision needed): ``videos=``
        (lists of PIL frames) go through :func:`frames_video_inputs`."""

        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

        def __call__(self, images=None, text=None, videos=None, **kwargs):
            """Process ``images`` and ``text`` like ``Qwen2VLProcessor``; with ``videos``, also
            ``pixel_values_videos`` and ``video_grid_thw``, and each ``<|video_pad|>`` of ``text`` expanded
            to its video's tokens."""
            if videos is None:
                return super().__call__(images=images, text=text, **kwargs)
            inputs = frames_video_inputs(self.image_processor, videos)
            merge_length = int(self.image_processor.merge_size) ** 2
            text = _expand_video_tokens(text, inputs["video_grid_thw"], merge_length, self.video_token)
            out = super().__call__(images=images, text=text, **kwargs)
            if kwargs.get("return_tensors") == "pt":
                import torch

                inputs = {name: torch.from_numpy(value) for name, value in inputs.items()}
            out.update(inputs)
            return out

    return TorchvisionFreeQwen2VLProcessor


def build_image_only_processor(image_processor, tokenizer, chat_template: str | None = None):
    """A Qwen2-VL processor over ``image_processor`` and ``tokenizer`` without transformers' (torchvision)
    video processor; videos, as lists of frames, go through :func:`frames_video_inputs`."""
    return _torchvision_free_class()(image_processor=image_processor, tokenizer=tokenizer, chat_template=chat_template)


def _multimodal_model_type(model: str | Path, **kwargs: Any) -> tuple[bool, str | None]:
    """Whether ``model`` (a local folder or a hub name) has a multimodal processor, and its ``model_type``.

    A folder has one when it holds ``preprocessor_config.json`` or ``processor_config.json``; a hub name
    (resolved and cached by transformers, like the tokenizer) when its config has a ``vision_config``.
    """
    import json

    local = Path(model).expanduser()
    if local.is_dir():
        config = local / "config.json"
        model_type = json.loads(config.read_text()).get("model_type") if config.is_file() else None
        has_processor = (local / "preprocessor_config.json").is_file() or (local / "processor_config.json").is_file()
        return has_processor, model_type
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(model), **kwargs)
    except (OSError, ValueError) as exc:
        raise RLCoreError(f"{model}: cannot read the model's config to find its processor: {exc}") from exc
    return getattr(config, "vision_config", None) is not None, getattr(config, "model_type", None)


def load_processor(path: str | Path, **kwargs: Any):
    """The multimodal processor of ``path`` (a local folder or a hub name), or ``None`` for a text-only model.

    Uses ``AutoProcessor``, except for Qwen2-VL-family models when torchvision is missing (their video
    processor needs it): then an image-only processor built from the saved image processor and tokenizer.
    """
    has_processor, model_type = _multimodal_model_type(path, **kwargs)
    if not has_processor:
        return None
    # after the check: importing the processor classes costs a text-only model's run start ~0.3 s for nothing
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer
    from transformers.utils import is_torchvision_available

    path = Path(path).expanduser() if Path(path).expanduser().is_dir() else path
    if model_type in QWEN2_VL_MODEL_TYPES and not is_torchvision_available():
        tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
        image_processor = AutoImageProcessor.from_pretrained(path, backend="pil")
        return build_image_only_processor(image_processor, tokenizer, getattr(tokenizer, "chat_template", None))
    try:
        return AutoProcessor.from_pretrained(path, **kwargs)
    except (ImportError, OSError, ValueError) as exc:
        raise RLCoreError(f"{path}: cannot load the model's processor: {exc}") from exc
