"""The plugin's hooks: registers the ``sglang`` rollout engine and its ``actor_rollout_ref.rollout.sglang`` keys.

This module must stay free of torch and sglang imports: ``rlcore plugins`` and config loading import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlcore import hookimpl


@hookimpl
def register_rollout_engines(register: Callable[..., None]) -> None:
    """Register :class:`rlcore_plugin_sglang.engine.SGLangRolloutEngine` as ``sglang``."""
    register(
        "sglang",
        "rlcore_plugin_sglang.engine:SGLangRolloutEngine",
        description="SGLang offline engine (CUDA only) with in-memory weight sync and memory release",
    )


@hookimpl
def config_defaults() -> dict[str, Any]:
    """The engine's own keys, under ``actor_rollout_ref.rollout.sglang``."""
    return {
        "actor_rollout_ref": {
            "rollout": {
                "sglang": {
                    # weights go to SGLang in buckets of at most this many MiB (bounds the extra memory of a sync)
                    "update_weights_bucket_mb": 512,
                    # extra keyword arguments for sglang.Engine(...), e.g. {"attention_backend": "fa3"}
                    "engine_kwargs": {},
                }
            }
        }
    }
