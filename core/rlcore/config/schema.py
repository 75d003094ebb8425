"""The typed config tree: :class:`Sections` holds every section of ``defaults.yaml`` as a frozen dataclass
(:mod:`rlcore.config.sections`), each field with its default, its type and a ``#:`` docstring, each section
with its checks.

The dataclasses are the one place of defaults: :func:`default_tree` gives the loader its base config and
:mod:`rlcore.config.defaults_file` renders ``defaults.yaml`` from them (the user-facing reference, checked
by a test). :meth:`Sections.from_tree` builds them from the resolved OmegaConf tree (every field must be a
key there), checks each :data:`~typing.Literal` choice, and runs each section's ``__post_init__`` checks;
every problem names its dotted key, and all of them are reported at once. Plugin sections (a backend's
``fsdp_config``, Megatron's, a preset's) come from the plugins' ``config_defaults`` hooks.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

from rlcore.config.problems import ConfigError
from rlcore.config.sections.actor import ActorCheckpointConfig, ActorConfig
from rlcore.config.sections.actor_rollout_ref import ActorRolloutRefConfig, ModelConfig, MtpConfig, RefConfig
from rlcore.config.sections.algorithm import AlgorithmConfig
from rlcore.config.sections.base import Section, field_types
from rlcore.config.sections.critic import CriticCheckpointConfig, CriticConfig, CriticModelConfig
from rlcore.config.sections.data import DataConfig, Truncation
from rlcore.config.sections.reward_model import CustomRewardFunctionConfig, RewardModelConfig, RewardModelModelConfig
from rlcore.config.sections.rollout import CheckpointEngineConfig, RolloutConfig, ValKwargs
from rlcore.config.sections.rollout_pool import RolloutPoolConfig
from rlcore.config.sections.runtime import RayKwargsConfig
from rlcore.config.sections.skip import SkipConfig
from rlcore.config.sections.trainer import AsyncTrainingConfig, TrainerConfig
from rlcore.config.sections.update import CHECKPOINT_CONTENTS, CheckpointConfig, LogProbConfig, PPOUpdateConfig

__all__ = [
    "CHECKPOINT_CONTENTS",
    "ActorCheckpointConfig",
    "ActorConfig",
    "ActorRolloutRefConfig",
    "AlgorithmConfig",
    "AsyncTrainingConfig",
    "CheckpointConfig",
    "CheckpointEngineConfig",
    "CriticCheckpointConfig",
    "CriticConfig",
    "CriticModelConfig",
    "CustomRewardFunctionConfig",
    "DataConfig",
    "LogProbConfig",
    "ModelConfig",
    "MtpConfig",
    "PPOUpdateConfig",
    "RayKwargsConfig",
    "RefConfig",
    "RewardModelConfig",
    "RewardModelModelConfig",
    "RolloutConfig",
    "RolloutPoolConfig",
    "Section",
    "Sections",
    "TrainerConfig",
    "Truncation",
    "ValKwargs",
    "default_section",
    "default_tree",
]

_S = TypeVar("_S", bound=Section)


@dataclasses.dataclass(frozen=True)
class Sections:
    """Every section of a run, in the order of ``defaults.yaml``: build it once with :meth:`from_tree` and
    read fields, not keys; ``Sections()`` holds the defaults (with their unresolved ``${...}`` references)."""

    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = dataclasses.field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = dataclasses.field(default_factory=CriticConfig)
    reward_model: RewardModelConfig = dataclasses.field(default_factory=RewardModelConfig)
    custom_reward_function: CustomRewardFunctionConfig = dataclasses.field(default_factory=CustomRewardFunctionConfig)
    algorithm: AlgorithmConfig = dataclasses.field(default_factory=AlgorithmConfig)
    trainer: TrainerConfig = dataclasses.field(default_factory=TrainerConfig)
    async_training: AsyncTrainingConfig = dataclasses.field(default_factory=AsyncTrainingConfig)
    rollout: RolloutPoolConfig = dataclasses.field(default_factory=RolloutPoolConfig)
    ray_kwargs: RayKwargsConfig = dataclasses.field(default_factory=RayKwargsConfig)
    skip: SkipConfig = dataclasses.field(default_factory=SkipConfig)

    @classmethod
    def from_tree(cls, config: DictConfig) -> Sections:
        """The sections of the resolved ``config``; one :class:`ConfigError` with every problem found."""
        hints = field_types(cls)
        values: dict[str, Section] = {}
        problems: list[str] = []
        for field in dataclasses.fields(cls):
            try:
                values[field.name] = hints[field.name].from_tree(config, field.name)
            except ConfigError as exc:
                problems += exc.problems
        if problems:
            raise ConfigError(*problems)
        return cls(**values)  # type: ignore[arg-type]


def default_tree() -> dict[str, Any]:
    """rlcore's defaults as plain nested data, in key order (``${...}`` references unresolved): the base
    config of the loader and the content of ``defaults.yaml``."""
    return dataclasses.asdict(Sections())


def default_section(cls: type[_S], **values: Any) -> _S:
    """The section ``cls`` (one with a :attr:`~Section.PATH`) built from rlcore's defaults with ``values``
    replacing some of them (a subsection's as a dict of its keys), each ``ref`` default resolved as the loader
    resolves it and every check run: a section for code without a run config (an LLM judge's rollout engine, a
    test), e.g. ``default_section(RolloutConfig, response_length=16)``."""
    if not cls.PATH:
        raise TypeError(f"{cls.__name__} has no PATH: build it with {cls.__name__}(...)")
    config = OmegaConf.create(default_tree())
    OmegaConf.update(config, cls.PATH, cls().tree(), merge=True)
    for name, value in values.items():
        OmegaConf.update(config, f"{cls.PATH}.{name}", value, merge=True)
    return cls.from_tree(config)
