"""Methods added to every vLLM worker process (``LLM(worker_extension_cls=...)``), called via ``collective_rpc``.

vLLM runs its model in worker processes; the trainer's tensors cannot be pickled across that boundary
as tensors (``memoryview`` objects are refused), and on CPU the loaded linear weights are repacked for
the CPU kernels, so ``model.load_weights`` no longer applies. The route that works on CPU and GPU alike:
serialise the state dict with safetensors into one ``bytes`` object and let the worker hand the tensors
to ``model_runner.reload_weights``, which re-runs vLLM's own loading and post-processing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

__all__ = ["RLCoreWorkerExtension"]


class _ModelRunner(Protocol):
    """What the extension uses of the vLLM worker's ``model_runner``."""

    def reload_weights(self, *, weights_iterator: list[tuple[str, torch.Tensor]]) -> object:
        """Load the named tensors into the served model."""


class RLCoreWorkerExtension:
    """Mixed into vLLM's worker class; ``self`` is the worker (it has ``model_runner``)."""

    model_runner: _ModelRunner

    def rlcore_load_weights(self, blob: bytes) -> int:
        """Load the safetensors-serialised ``(name, tensor)`` pairs in ``blob`` into the served model.

        Returns how many tensors were loaded. Names are Hugging Face state-dict names; vLLM maps them
        onto its fused parameters (``qkv_proj``, ``gate_up_proj``) and skips a tied ``lm_head.weight``.
        """
        from safetensors.torch import load

        tensors = load(blob)
        self.model_runner.reload_weights(weights_iterator=list(tensors.items()))
        return len(tensors)
