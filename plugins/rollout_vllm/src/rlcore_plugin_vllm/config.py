"""The vLLM engine's own keys, ``actor_rollout_ref.rollout.vllm``, as a typed section with their defaults
(torch-free: the hooks module returns it from ``config_defaults``), and the typed rollout section the engine is
built with (:class:`VLLMRolloutConfig`)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlcore.api import RolloutConfig, Section


@dataclass(frozen=True)
class VLLMConfig(Section):
    """``actor_rollout_ref.rollout.vllm``: settings of the vLLM engine that verl's rollout keys do not cover."""

    PATH = "actor_rollout_ref.rollout.vllm"
    #: KV-cache size in GiB on CPU (VLLM_CPU_KVCACHE_SPACE); on GPU gpu_memory_utilization applies
    cpu_kv_cache_gib: float = 1
    #: extra keyword arguments for vllm.LLM(...), e.g. {"swap_space": 0}
    engine_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VLLMRolloutConfig(RolloutConfig):
    """``actor_rollout_ref.rollout`` as the vllm engine reads it: rlcore's keys, this plugin's ``vllm`` and the
    ``profiler`` subsection rlcore-plugin-profiler adds (the engine's ``config_class``)."""

    #: the engine's own settings
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    #: rlcore-plugin-profiler's ``profiler`` subsection (empty without that plugin): with
    #: ``tool_config.torch.discrete`` vLLM's own profiler traces a profiled step's generation
    profiler: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_tree(cls, config: DictConfig, path: str | None = None) -> VLLMRolloutConfig:
        """:meth:`rlcore.api.Section.from_tree`, with an empty ``profiler`` where rlcore-plugin-profiler is not
        installed (the tree then has no such subsection)."""
        path = path or cls.PATH
        if OmegaConf.select(config, f"{path}.profiler") is None:
            config = copy.deepcopy(config)
            OmegaConf.update(config, f"{path}.profiler", {}, force_add=True)
        return super().from_tree(config, path)

    def torch_trace(self) -> dict[str, Any] | None:
        """The rollout stage's torch options (``profiler.tool_config.torch``) when they ask for a discrete trace,
        else None."""
        options = (self.profiler.get("tool_config") or {}).get("torch")
        return options if isinstance(options, dict) and options.get("discrete") is True else None
