"""verl's kernel switches for the models an engine trains: ``model.use_liger``, ``model.use_fused_kernels``
and ``use_torch_compile``.

- ``use_liger``: Liger's Triton kernels (RMSNorm, RoPE, SwiGLU, ...) patched into the model instance
  (``liger_kernel.transformers._apply_liger_kernel_to_instance``). Triton needs CUDA: on another device,
  or without the ``liger-kernel`` package, the engine stops with an error naming the key.
- ``use_fused_kernels``: verl's fused Triton kernels that compute log-probs and entropies from the hidden
  states without materialising the logits. rlcore has no such kernels: ``true`` is rejected with the
  config (:data:`rlcore.config.unsupported.UNSUPPORTED_VALUES`) on every device.
- ``use_torch_compile``: ``torch.compile`` of the model's forward (``nn.Module.compile``); it runs on CPU
  (inductor's C++ backend) and CUDA.

Both engines (FSDP, DeepSpeed) call :func:`check_kernel_switches` when they check their config and
:func:`apply_kernel_switches` on the model before wrapping it.
"""

from __future__ import annotations

from omegaconf import DictConfig
from torch import nn

from rlcore.config.keys import select
from rlcore.errors import RLCoreError
from rlcore.workers.distributed import DEVICE_KEY, resolve_device


def _device_type(config: DictConfig) -> str:
    """The device type (``cpu``/``cuda``) that ``trainer.device`` resolves to on this machine."""
    return resolve_device(select(config, DEVICE_KEY, "auto")).type


def check_kernel_switches(config: DictConfig, model_section: str) -> None:
    """Raise an error naming the key when ``use_liger`` cannot run here: off CUDA or without
    ``liger-kernel``. (``use_fused_kernels=true`` is rejected with the config, :mod:`rlcore.config.unsupported`.)"""
    liger_key = f"{model_section}.use_liger"
    if select(config, liger_key, False):
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


def apply_kernel_switches(model: nn.Module, config: DictConfig, section: str, model_section: str) -> None:
    """Patch Liger's kernels into ``model`` (``use_liger``) and compile its forward (``use_torch_compile``),
    in place; call :func:`check_kernel_switches` first."""
    if select(config, f"{model_section}.use_liger", False):
        from liger_kernel.transformers import _apply_liger_kernel_to_instance

        _apply_liger_kernel_to_instance(model=model.backbone if hasattr(model, "backbone") else model)
    if select(config, f"{section}.use_torch_compile", False):
        model.compile(dynamic=True)
