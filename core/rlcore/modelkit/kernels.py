"""verl's kernel switches for the models an engine trains: ``model.use_liger``, ``model.use_fused_kernels``
and ``use_torch_compile``.

- ``use_liger``: Liger's Triton kernels (RMSNorm, RoPE, SwiGLU, ...) patched into the model instance
  (``liger_kernel.transformers._apply_liger_kernel_to_instance``). Triton needs CUDA: on another device,
  or without the ``liger-kernel`` package, the engine stops with an error naming the key.
- ``use_fused_kernels``: log-probs and entropies computed from the last hidden states and the LM head in
  chunks of tokens, without materialising the logits (:mod:`rlcore.modelkit.fused_logprobs`);
  ``fused_kernel_options.impl_backend`` picks ``torch`` (any device) or ``triton`` (``torch.compile``-d
  chunk arithmetic: CUDA and the triton package, else an error naming the key). Engines pass
  :func:`fused_backend` to :func:`rlcore.modelkit.hf_models.response_outputs`.
- ``use_torch_compile``: ``torch.compile`` of the model's forward (``nn.Module.compile``); it runs on CPU
  (inductor's C++ backend) and CUDA.

Both engines (FSDP, DeepSpeed) call :func:`check_kernel_switches` when they check their config and
:func:`apply_kernel_switches` on the model before wrapping it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from omegaconf import DictConfig
from torch import nn

from rlcore.config.keys import select
from rlcore.errors import RLCoreError
from rlcore.modelkit.distributed import DEVICE_KEY, resolve_device
from rlcore.modelkit.fused_logprobs import FUSED_BACKENDS

if TYPE_CHECKING:
    from rlcore.config.sections.actor_rollout_ref import ModelConfig


def _device_type(config: DictConfig) -> str:
    """The device type (``cpu``/``cuda``) that ``trainer.device`` resolves to on this machine."""
    return resolve_device(select(config, DEVICE_KEY, "auto")).type


def fused_backend(model: ModelConfig) -> str | None:
    """The ``fused_kernel_options.impl_backend`` of the model section when its ``use_fused_kernels`` is
    true, else None (the logits path)."""
    return str(model.fused_kernel_options.impl_backend) if model.use_fused_kernels else None


def _check_fused_kernels(config: DictConfig, model: ModelConfig, model_section: str) -> None:
    """Raise an error naming the key for an unknown ``impl_backend`` or ``triton`` where it cannot run."""
    backend = fused_backend(model)
    key = f"{model_section}.fused_kernel_options.impl_backend"
    if backend is None or backend == "torch":
        return
    if backend not in FUSED_BACKENDS:
        raise RLCoreError(f"{key}={backend!r} is not one of {', '.join(FUSED_BACKENDS)}")
    device = _device_type(config)
    if device != "cuda":
        raise RLCoreError(
            f"{key}=triton needs a CUDA device (the fused chunks compile to Triton kernels), but {DEVICE_KEY} "
            f"resolves to {device} here; set {key}=torch"
        )
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        raise RLCoreError(f"{key}=triton needs the triton package: pip install triton (or set {key}=torch)") from exc


def check_kernel_switches(config: DictConfig, model: ModelConfig, model_section: str) -> None:
    """Raise an error naming the key when ``use_liger`` of ``model`` (the section at ``model_section``) cannot
    run here (off CUDA or without ``liger-kernel``) or ``use_fused_kernels`` asks for a backend that cannot
    (:func:`fused_backend`)."""
    _check_fused_kernels(config, model, model_section)
    liger_key = f"{model_section}.use_liger"
    if model.use_liger:
        device = _device_type(config)
        if device != "cuda":
            raise RLCoreError(
                f"{liger_key}=true needs a CUDA device (Liger's kernels are written in Triton), but "
                f"{DEVICE_KEY} resolves to {device} here; set {liger_key}=false"
            )
        try:
            import liger_kernel.transformers  # noqa: F401
        except ImportError as exc:
            raise RLCoreError(f"{liger_key}=true needs the liger-kernel package: pip install liger-kernel") from exc


def apply_kernel_switches(module: nn.Module, model: ModelConfig, config: DictConfig, section: str) -> None:
    """Patch Liger's kernels into ``module`` (``model.use_liger``) and compile its forward
    (``{section}.use_torch_compile``), in place; call :func:`check_kernel_switches` first."""
    if model.use_liger:
        from liger_kernel.transformers import _apply_liger_kernel_to_instance

        _apply_liger_kernel_to_instance(model=module.backbone if hasattr(module, "backbone") else module)
    if select(config, f"{section}.use_torch_compile", False):
        module.compile(dynamic=True)
