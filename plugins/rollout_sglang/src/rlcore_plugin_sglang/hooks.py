"""The plugin's hooks: registers the ``sglang`` rollout engine and its ``actor_rollout_ref.rollout.sglang`` keys.

This module must stay free of torch and sglang imports: ``rlcore plugins`` and config loading import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rlcore import hookimpl
from rlcore_plugin_sglang.config import SGLangRolloutConfig

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"

if TYPE_CHECKING:
    from omegaconf import DictConfig


@hookimpl
def register_rollout_engines(register: Callable[..., None]) -> None:
    """Register :class:`rlcore_plugin_sglang.engine.SGLangRolloutEngine` as ``sglang``."""
    register(
        "sglang",
        "rlcore_plugin_sglang.engine:SGLangRolloutEngine",
        description="SGLang offline engine (CUDA only) with in-memory weight sync and memory release",
    )


@hookimpl
def config_defaults() -> SGLangRolloutConfig:
    """The engine's own keys, under ``actor_rollout_ref.rollout.sglang``, and verl's server-mode keys
    ``actor_rollout_ref.rollout.{sglang_rollout_mode, server}``, typed (:class:`~rlcore_plugin_sglang.config.SGLangRolloutConfig`)."""
    return SGLangRolloutConfig()


@hookimpl
def on_config_resolved(config: DictConfig) -> None:
    """Check ``rollout.sglang_rollout_mode`` and ``rollout.server`` before anything starts (errors name the key)."""
    from rlcore_plugin_sglang.server import ServerSettings, rollout_mode

    rollout = config.actor_rollout_ref.rollout
    rollout_mode(rollout)
    ServerSettings.from_rollout(rollout)
