"""Reading single config values by dotted key: one helper for a value with a default, one for a count; and the
dotted keys of the sections that many modules name in their messages."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlcore.config.problems import ConfigError

#: the rollout section of the config
ROLLOUT_KEY = "actor_rollout_ref.rollout"


def select(config: DictConfig, key: str, default: Any = None) -> Any:
    """The value at the dotted ``key``, or ``default`` when it is missing or null."""
    value = OmegaConf.select(config, key, default=None)
    return default if value is None else value


def positive_int(value: Any, key: str) -> int:
    """``value`` if it is an int ≥ 1, else a :class:`~rlcore.config.problems.ConfigError` naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key} must be a positive integer, got {value!r}")
    return value


def positive_key(config: DictConfig, key: str) -> int:
    """The value at the dotted ``key`` as a positive int (:func:`positive_int`)."""
    return positive_int(OmegaConf.select(config, key, default=None), key)
