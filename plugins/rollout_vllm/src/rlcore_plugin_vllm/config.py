"""The vLLM engine's own keys, ``actor_rollout_ref.rollout.vllm``, as a typed section with their defaults
(torch-free: the hooks module returns it from ``config_defaults``), and the typed rollout section the engine is
built with (:class:`VLLMRolloutConfig`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlcore.api import MtpConfig, RolloutConfig, Section, to_plain


@dataclass(frozen=True)
class VLLMConfig(Section):
    """``actor_rollout_ref.rollout.vllm``: settings of the vLLM engine that verl's rollout keys do not cover."""

    PATH = "actor_rollout_ref.rollout.vllm"
    #: KV-cache size in GiB on CPU (VLLM_CPU_KVCACHE_SPACE); on GPU gpu_memory_utilization applies
    cpu_kv_cache_gib: float = 1
    #: extra keyword arguments passed through to vllm.LLM(...), e.g. {"mm_processor_cache_gb": 0}; one that neither
    #: vllm.LLM nor vllm.EngineArgs takes is an error naming it when the engine starts
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
    #: the policy model's ``actor_rollout_ref.model.mtp`` (verl's ``rollout.mtp`` mirrors it the same way)
    mtp: MtpConfig = field(default_factory=MtpConfig)

    @classmethod
    def from_tree(cls, config: DictConfig, path: str | None = None) -> VLLMRolloutConfig:
        """:meth:`rlcore.api.Section.from_tree`, with an empty ``profiler`` where rlcore-plugin-profiler is not
        installed (the tree then has no such subsection) and the policy model's ``mtp`` section as ``mtp``."""
        path = path or cls.PATH
        data = to_plain(OmegaConf.select(config, path, default=None)) or {}
        if data.get("profiler") is None:
            data["profiler"] = {}
        data["mtp"] = to_plain(OmegaConf.select(config, MtpConfig.PATH, default=None)) or {}
        return cls.from_data(data, path)

    def speculative_config(self) -> dict[str, Any] | None:
        """vLLM's ``speculative_config`` when ``mtp.enable_rollout`` is on (the MTP layers draft
        ``num_speculative_tokens`` tokens with ``method``), else None."""
        if not self.mtp.enable_rollout:
            return None
        return {"method": self.mtp.method, "num_speculative_tokens": int(self.mtp.num_speculative_tokens)}

    def compilation_config(self, given: Any, *, graphs: bool) -> dict[str, Any] | None:
        """vLLM's ``compilation_config`` with ``cudagraph_capture_sizes`` as its ``cudagraph_capture_sizes``, over
        ``given`` (``vllm.engine_kwargs``' ``compilation_config``: a dict, its JSON or None), when the engine
        captures CUDA graphs (``graphs``: on CUDA without ``enforce_eager``), as verl passes it; else None (the
        engine arguments stay as they are)."""
        if self.cudagraph_capture_sizes is None or not graphs:
            return None
        base = json.loads(given) if isinstance(given, str) else dict(given or {})
        return {**base, "cudagraph_capture_sizes": list(self.cudagraph_capture_sizes)}

    def torch_trace(self) -> dict[str, Any] | None:
        """The rollout stage's torch options (``profiler.tool_config.torch``) when they ask for a discrete trace,
        else None; verl's Ascend settings (``profiler.tool_config.npu``, recorded by torch's profiler here) in the
        same terms: ``npu`` is the device's activity (``cuda``), ``module`` a call stack (``stack``, as verl's vLLM
        profiler arguments take it), empty contents CPU activity only."""
        tools = self.profiler.get("tool_config") or {}
        options = tools.get("torch")
        if isinstance(options, dict) and options.get("discrete") is True:
            return options
        npu = tools.get("npu")
        if not isinstance(npu, dict) or npu.get("discrete") is not True:
            return None
        mapping = {"npu": "cuda", "module": "stack"}
        return {**npu, "contents": [mapping.get(c, c) for c in npu.get("contents") or []] or ["cpu"]}
