"""``data``: the prompt files, their columns, batch sizes and lengths."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rlcore.config.sections.base import Section

#: how a prompt longer than ``data.max_prompt_length`` is handled
Truncation = Literal["left", "right", "middle", "error"]


@dataclass(frozen=True)
class CustomClsConfig(Section):
    """``data.custom_cls``: a dataset class of your own instead of the dataset component."""

    #: the .py file defining the dataset class (null: the dataset component)
    path: str | None = None
    #: the class's name in that file
    name: str | None = None


@dataclass(frozen=True)
class SamplerConfig(Section):
    """``data.sampler``: a custom training sampler (docs/data.md): cls(data_source=, data_config=)."""

    #: pkg://dotted.module, file://path.py or a .py path
    class_path: str | None = None
    #: a torch Sampler; an rlcore.data.sampler.AbstractCurriculumSampler gets update(batch)
    class_name: str | None = None


@dataclass(frozen=True)
class DataConfig(Section):
    """``data``: batch sizes and lengths (the dataset component reads the rest)."""

    PATH = "data"
    #: dataset component (kind `dataset`)
    dataset: str = "rl"
    #: parquet/jsonl path or list; null = the bundled CPU task
    train_files: str | list[str] | None = None
    #: the validation files (one path or a list; null: no validation set)
    val_files: str | list[str] | None = None
    #: the column holding the chat prompt (a list of messages)
    prompt_key: str = "prompt"
    #: images column of multimodal rows (one per <image> placeholder; docs/vision-language.md)
    image_key: str = "images"
    #: videos column of multimodal rows (one per <video> placeholder: a list of frames or a local video file)
    video_key: str = "videos"
    #: verl's resize before the processor: images and video frames get sides in multiples of this × the
    #: processor's merge_size (qwen_vl_utils' smart resize; docs/vision-language.md); null: as they are
    image_patch_size: int | None = None
    #: the column naming each row's scorer (its data source)
    reward_fn_key: str = "data_source"
    #: prompt tokens kept
    max_prompt_length: int = 512
    #: response tokens generated at most
    max_response_length: int = 512
    #: prompts per step
    train_batch_size: int = 1024
    #: prompts per generation round (dynamic sampling); null = train_batch_size
    gen_batch_size: int | None = None
    #: null = the whole validation set in one batch
    val_batch_size: int | None = None
    #: keep each row's chat messages next to its tokens (multi-turn rollouts read them)
    return_raw_chat: bool = True
    #: shuffle the training rows each epoch
    shuffle: bool = True
    #: seed of the training rows' shuffle
    seed: int = 1
    #: shuffle the validation rows
    validation_shuffle: bool = False
    #: verl's speed setting: rlcore tokenizes prompts once (another value: a note)
    dataloader_num_workers: int = 0
    #: drop rows whose prompt is longer than max_prompt_length (instead of truncating)
    filter_overlong_prompts: bool = False
    #: verl's speed setting: the filter runs once (another value: a note)
    filter_overlong_prompts_workers: int = 1
    #: left | right | middle | error
    truncation: Truncation = "error"
    #: -1 = all rows
    train_max_samples: int = -1
    #: validation rows used (-1: all)
    val_max_samples: int = -1
    #: extra keyword arguments passed through to the tokenizer's apply_chat_template
    apply_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    #: a dataset class of your own instead of the dataset component
    custom_cls: CustomClsConfig = field(default_factory=CustomClsConfig)
    #: a custom training sampler (docs/data.md): cls(data_source=, data_config=)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)

    def problems(self) -> list[str]:
        """The optional batch sizes and the image patch size are positive or null."""
        return (
            self.positive("gen_batch_size", null=True)
            + self.positive("val_batch_size", null=True)
            + self.positive("image_patch_size", null=True)
        )
