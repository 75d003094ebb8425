"""The SGLang engine's keys, ``actor_rollout_ref.rollout.sglang``, and verl's server-mode keys
``actor_rollout_ref.rollout.{sglang_rollout_mode, server}``, as typed sections with their defaults (torch-free:
the hooks module returns them from ``config_defaults``), and the typed rollout section the engine is built with
(:class:`SGLangRolloutSection`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlcore.api import MtpConfig, RolloutConfig, Section, to_plain


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

    #: the policy model's ``actor_rollout_ref.model.mtp`` (verl's ``rollout.mtp`` mirrors it the same way)
    mtp: MtpConfig = field(default_factory=MtpConfig)

    @classmethod
    def from_tree(cls, config: DictConfig, path: str | None = None) -> SGLangRolloutSection:
        """:meth:`rlcore.api.Section.from_tree`, with the policy model's ``mtp`` section as ``mtp``."""
        path = path or cls.PATH
        data = to_plain(OmegaConf.select(config, path, default=None)) or {}
        data["mtp"] = to_plain(OmegaConf.select(config, MtpConfig.PATH, default=None)) or {}
        return cls.from_data(data, path)

    def speculative_kwargs(self) -> dict[str, Any]:
        """SGLang's speculative-decoding arguments when ``mtp.enable_rollout`` is on (the MTP layers are EAGLE's
        draft model: ``speculative_algorithm``, ``speculative_num_steps``, ``speculative_eagle_topk``,
        ``speculative_num_draft_tokens``), else none."""
        if not self.mtp.enable_rollout:
            return {}
        names = (
            "speculative_algorithm",
            "speculative_num_steps",
            "speculative_eagle_topk",
            "speculative_num_draft_tokens",
        )
        return {name: getattr(self.mtp, name) for name in names}
