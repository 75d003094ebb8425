"""The vLLM engine's own keys, ``actor_rollout_ref.rollout.vllm``, as a typed section with their defaults
(torch-free: the hooks module returns it from ``config_defaults``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlcore.api import Section


@dataclass(frozen=True)
class VLLMConfig(Section):
    """``actor_rollout_ref.rollout.vllm``: settings of the vLLM engine that verl's rollout keys do not cover."""

    PATH = "actor_rollout_ref.rollout.vllm"
    #: KV-cache size in GiB on CPU (VLLM_CPU_KVCACHE_SPACE); on GPU gpu_memory_utilization applies
    cpu_kv_cache_gib: float = 1
    #: extra keyword arguments for vllm.LLM(...), e.g. {"swap_space": 0}
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
