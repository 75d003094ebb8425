"""The plugin's hooks: registers the ``sglang`` rollout engine and its ``actor_rollout_ref.rollout.sglang`` keys.

This module must stay free of torch and sglang imports: ``rlcore plugins`` and config loading import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlcore import hookimpl

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
def config_defaults() -> dict[str, Any]:
    """The engine's own keys, under ``actor_rollout_ref.rollout.sglang``, and verl's server-mode keys
    ``actor_rollout_ref.rollout.{sglang_rollout_mode, server}``."""
    return {
        "actor_rollout_ref": {
            "rollout": {
                # verl's SGLang server mode: "engine" (in-process sglang.Engine) or "server" (an HTTP server process)
                "sglang_rollout_mode": "engine",
                # the HTTP client of server mode (verl's ServerConfig; rlcore_plugin_sglang.server)
                "server": {
                    "timeout": 60.0,  # seconds per request
                    "max_attempts": 3,  # tries per request (timeouts, refused connections, 5xx)
                    "retry_delay": 2.0,  # seconds before the 2nd try, doubling after each
                    "max_connections": 1000,  # connections open at once
                    "max_start_wait_time": 300.0,  # seconds the server may take to become healthy
                },
                "sglang": {
                    # weights go to SGLang in buckets of at most this many MiB (bounds the extra memory of a sync)
                    "update_weights_bucket_mb": 512,
                    # extra keyword arguments for sglang.Engine(...), e.g. {"attention_backend": "fa3"}
                    "engine_kwargs": {},
                },
            }
        }
    }


@hookimpl
def on_config_resolved(config: DictConfig) -> None:
    """Check ``rollout.sglang_rollout_mode`` and ``rollout.server`` before anything starts (errors name the key)."""
    from rlcore_plugin_sglang.server import ServerSettings, rollout_mode

    rollout = config.actor_rollout_ref.rollout
    rollout_mode(rollout)
    ServerSettings.from_rollout(rollout)
