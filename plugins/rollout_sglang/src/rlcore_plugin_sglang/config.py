"""The SGLang engine's keys, ``actor_rollout_ref.rollout.sglang``, and verl's server-mode keys
``actor_rollout_ref.rollout.{sglang_rollout_mode, server}``, as typed sections with their defaults (torch-free:
the hooks module returns them from ``config_defaults``), and the typed rollout section the engine is built with
(:class:`SGLangRolloutSection`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlcore.api import RolloutConfig, Section


@dataclass(frozen=True)
class SGLangServerConfig(Section):
    """``actor_rollout_ref.rollout.server``: the HTTP client of server mode (verl's ServerConfig;
    :mod:`rlcore_plugin_sglang.server`)."""

    #: seconds per request
    timeout: float = 60.0
    #: tries per request (timeouts, refused connections, 5xx)
    max_attempts: int = 3
    #: seconds before the 2nd try, doubling after each
    retry_delay: float = 2.0
    #: connections open at once
    max_connections: int = 1000
    #: seconds the server may take to become healthy
    max_start_wait_time: float = 300.0


@dataclass(frozen=True)
class SGLangEngineConfig(Section):
    """``actor_rollout_ref.rollout.sglang``: settings of the SGLang engine that verl's rollout keys do not cover."""

    #: weights go to SGLang in buckets of at most this many MiB (bounds the extra memory of a sync)
    update_weights_bucket_mb: int = 512
    #: extra keyword arguments for sglang.Engine(...), e.g. {"attention_backend": "fa3"}
    engine_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SGLangRolloutConfig(Section):
    """The SGLang plugin's keys of ``actor_rollout_ref.rollout``."""

    PATH = "actor_rollout_ref.rollout"
    #: verl's SGLang server mode: engine (in-process sglang.Engine) or server (an HTTP server process)
    sglang_rollout_mode: str = "engine"
    #: the HTTP client of server mode
    server: SGLangServerConfig = field(default_factory=SGLangServerConfig)
    #: the engine's own settings
    sglang: SGLangEngineConfig = field(default_factory=SGLangEngineConfig)


@dataclass(frozen=True)
class SGLangRolloutSection(SGLangRolloutConfig, RolloutConfig):
    """``actor_rollout_ref.rollout`` as the sglang engine reads it: rlcore's keys and this plugin's (the engine's
    ``config_class``)."""
