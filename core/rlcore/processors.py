"""Load a model's multimodal processor (``AutoProcessor``), also where torchvision is absent.

transformers' ``Qwen2VLProcessor`` always wants a video processor, and Qwen2-VL's video processor needs
torchvision, which the CPU torch here cannot use. :func:`load_processor` therefore builds the same
processor without its video part when torchvision is missing; images work the same, videos are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcore.errors import RLCoreError

#: ``model_type`` values whose processor is a ``Qwen2VLProcessor`` (Qwen2.5-VL's subclasses it).
QWEN2_VL_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl")


def _image_only_class():
    from transformers import Qwen2VLProcessor

    class ImageOnlyQwen2VLProcessor(Qwen2VLProcessor):
        """``Qwen2VLProcessor`` without a video processor (no torchvision needed); ``videos=`` is refused."""

        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

        def __call__(self, images=None, text=None, videos=None, **kwargs):
            """Process ``images`` and ``text`` like ``Qwen2VLProcessor``; ``videos`` raise ``ValueError``."""
            if videos is not None:
                raise ValueError("videos need torchvision's Qwen2-VL video processor, which is not installed")
            return super().__call__(images=images, text=text, **kwargs)

    return ImageOnlyQwen2VLProcessor


def build_image_only_processor(image_processor, tokenizer, chat_template: str | None = None):
    """A Qwen2-VL processor over ``image_processor`` and ``tokenizer`` with no video processor."""
    return _image_only_class()(image_processor=image_processor, tokenizer=tokenizer, chat_template=chat_template)


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
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer
    from transformers.utils import is_torchvision_available

    has_processor, model_type = _multimodal_model_type(path, **kwargs)
    if not has_processor:
        return None
    path = Path(path).expanduser() if Path(path).expanduser().is_dir() else path
    if model_type in QWEN2_VL_MODEL_TYPES and not is_torchvision_available():
        tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
        image_processor = AutoImageProcessor.from_pretrained(path, backend="pil")
        return build_image_only_processor(image_processor, tokenizer, getattr(tokenizer, "chat_template", None))
    try:
        return AutoProcessor.from_pretrained(path, **kwargs)
    except (ImportError, OSError, ValueError) as exc:
        raise RLCoreError(f"{path}: cannot load the model's processor: {exc}") from exc
