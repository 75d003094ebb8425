"""FSDP2 wrapping, precision and offload helpers for Hugging Face models.

Precision policy (documented in the README): parameters are kept in ``fsdp_config.model_dtype`` (fp32 by
default, the master weights). On CUDA, ``fsdp_config.dtype`` (bf16 by default) is the compute dtype of an
FSDP2 ``MixedPrecisionPolicy`` whose gradients are reduced in ``fsdp_config.mixed_precision.reduce_dtype``
(null by default: fp32; verl's ``mixed_precision.param_dtype`` is ``dtype``). On CPU the model computes in ``model_dtype``
unless ``fsdp_config.cpu_autocast`` is set: then its forward passes (and so their backward) run under
``torch.autocast("cpu", dtype)`` (:func:`compute_context`), which CPUs with AMX or AVX512-BF16 run about
twice as fast as float32 (bench/vs_trl.py ``--bf16``); weights, gradients and optimizer state stay in
``model_dtype``.
``mixed_precision.buffer_dtype`` (null by default: ``model_dtype``) is the dtype the model's floating-point
buffers are kept in, on every device (:func:`cast_buffers`), as FSDP1's ``MixedPrecision.buffer_dtype`` keeps them.
``offload_policy``, ``param_offload`` and ``optimizer_offload`` only act on CUDA (on CPU there is nothing
to offload to).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

from rlcore.api import RLCoreError, parse_dtype
from rlcore_plugin_fsdp.config import FSDPConfig, MixedPrecisionConfig

logger = logging.getLogger(__name__)


#: ``fsdp_config`` keys of verl's FSDP-Turbo that the plan reads and the engine does not: the marker
#: ``strategy=fsdp_turbo`` and the speed choices kept in ``turbo_config`` (:mod:`rlcore_plugin_fsdp.substitution`)
SUBSTITUTION_KEYS = ("strategy", "turbo_config")


def resolve_fsdp_config(section: Mapping[str, Any] | None, key: str) -> dict[str, Any]:
    """The ``fsdp_config`` section at ``key`` merged over the plugin defaults, with its types checked."""
    resolved = FSDPConfig().tree()
    known = list(resolved)
    for name, value in (section or {}).items():
        if name in SUBSTITUTION_KEYS:
            continue
        if name not in known:
            raise RLCoreError(f"unknown key {key}.{name}; known keys: {', '.join(known)}")
        resolved[name] = value
    resolved["mixed_precision"] = _resolve_mixed_precision(resolved["mixed_precision"], f"{key}.mixed_precision")
    flags = (
        "param_offload",
        "optimizer_offload",
        "offload_policy",
        "reshard_after_forward",
        "forward_prefetch",
        "full_determinism",
    )
    for name in (*flags, "cpu_autocast"):
        if not isinstance(resolved[name], bool):
            raise RLCoreError(f"{key}.{name} must be true or false, got {resolved[name]!r}")
    if isinstance(resolved["fsdp_size"], bool) or not isinstance(resolved["fsdp_size"], int):
        raise RLCoreError(f"{key}.fsdp_size must be an integer (-1 = all ranks), got {resolved['fsdp_size']!r}")
    resolved["model_dtype"] = parse_dtype(resolved["model_dtype"], f"{key}.model_dtype")
    resolved["dtype"] = parse_dtype(resolved["dtype"], f"{key}.dtype")
    if resolved["cpu_autocast"] and resolved["dtype"] not in (torch.bfloat16, torch.float16):
        raise RLCoreError(
            f"{key}.cpu_autocast=true computes in {key}.dtype, which must be bf16 or fp16, got {resolved['dtype']}"
        )
    return resolved


def _resolve_mixed_precision(section: Mapping[str, Any] | None, key: str) -> dict[str, Any]:
    """``fsdp_config.mixed_precision`` merged over its defaults, its dtypes parsed (``buffer_dtype`` may be null)."""
    resolved = MixedPrecisionConfig().tree()
    for name, value in (section or {}).items():
        if name not in resolved:
            raise RLCoreError(f"unknown key {key}.{name}; known keys: {', '.join(resolved)}")
        resolved[name] = value
    for name in ("reduce_dtype", "buffer_dtype"):
        if resolved[name] is not None:
            resolved[name] = parse_dtype(resolved[name], f"{key}.{name}")
    return resolved


def mixed_precision_policy(fsdp_config: Mapping[str, Any]) -> MixedPrecisionPolicy | None:
    """The FSDP2 policy of a CUDA model: parameters gathered and computed in ``dtype``, gradients reduced in
    ``mixed_precision.reduce_dtype`` (null: float32 when ``dtype`` is not ``model_dtype``, else ``model_dtype``);
    None when all three are ``model_dtype``."""
    reduce_dtype = fsdp_config["mixed_precision"]["reduce_dtype"]
    if reduce_dtype is None:
        reduce_dtype = (
            torch.float32 if fsdp_config["dtype"] != fsdp_config["model_dtype"] else fsdp_config["model_dtype"]
        )
    if fsdp_config["dtype"] == fsdp_config["model_dtype"] == reduce_dtype:
        return None
    return MixedPrecisionPolicy(param_dtype=fsdp_config["dtype"], reduce_dtype=reduce_dtype, cast_forward_inputs=True)


def cast_buffers(model: nn.Module, fsdp_config: Mapping[str, Any]) -> None:
    """Keep the floating-point buffers of ``model`` in ``mixed_precision.buffer_dtype`` (when it is set)."""
    dtype = fsdp_config["mixed_precision"]["buffer_dtype"]
    if dtype is None:
        return
    for module in model.modules():
        for name, buffer in module.named_buffers(recurse=False):
            if buffer is not None and buffer.is_floating_point():
                setattr(module, name, buffer.to(dtype))


#: the environment verl's ``enable_full_determinism`` sets: cuBLAS's fixed workspace (deterministic GEMMs), NCCL's
#: fixed reduction order and flash-attention's deterministic backward
DETERMINISTIC_ENV = {
    "CUBLAS_WORKSPACE_CONFIG": ":16:8",
    "NCCL_DETERMINISTIC": "1",
    "FLASH_ATTENTION_DETERMINISTIC": "1",
}


def enable_full_determinism() -> None:
    """``fsdp_config.full_determinism``: what verl's ``enable_full_determinism`` does, for this whole process
    (the roles a worker holds share it): :data:`DETERMINISTIC_ENV`, ``torch.use_deterministic_algorithms(True,
    warn_only=True)`` (an operation without a deterministic kernel warns) and cuDNN off its autotuner and
    nondeterministic kernels. Seeding stays the run's (``trainer.seed``)."""
    os.environ.update(DETERMINISTIC_ENV)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.enabled = False


def compute_dtype(fsdp_config: Mapping[str, Any], device: torch.device) -> torch.dtype:
    """The dtype the model's matrix products run in: ``dtype`` on CUDA (FSDP2 mixed precision) and on CPU
    with ``cpu_autocast``, else ``model_dtype``."""
    if device.type == "cuda" or (device.type == "cpu" and fsdp_config["cpu_autocast"]):
        return fsdp_config["dtype"]
    return fsdp_config["model_dtype"]


def compute_context(fsdp_config: Mapping[str, Any], device: torch.device) -> AbstractContextManager[Any]:
    """``torch.autocast("cpu", dtype)`` for a forward pass on CPU with ``cpu_autocast``, else a no-op (on
    CUDA the FSDP2 mixed-precision policy casts instead)."""
    if device.type == "cpu" and fsdp_config["cpu_autocast"] and fsdp_config["dtype"] != fsdp_config["model_dtype"]:
        return torch.autocast("cpu", dtype=fsdp_config["dtype"])
    return nullcontext()


def warn_without_native_bf16(fsdp_config: Mapping[str, Any], device: torch.device, key: str) -> None:
    """Warn when ``cpu_autocast`` asks for bf16 on a CPU without native bf16 instructions (AMX or
    AVX512-BF16), where autocast is slower than float32."""
    if device.type != "cpu" or not fsdp_config["cpu_autocast"] or fsdp_config["dtype"] != torch.bfloat16:
        return
    if not torch.backends.mkldnn.is_available() or not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        logger.warning(
            "%s.cpu_autocast=true: this CPU has no native bf16 instructions (AMX or AVX512-BF16), so bf16 "
            "autocast will be slower than float32",
            key,
        )


def build_device_mesh(device: torch.device, world_size: int, fsdp_size: int, key: str) -> DeviceMesh:
    """A 1-D ``("fsdp",)`` mesh over all ranks, or a 2-D ``("ddp", "fsdp")`` HSDP mesh.

    ``fsdp_size`` (the config key ``key``) of -1, 0 or at least ``world_size`` shards over every rank;
    a smaller value shards within groups of that size and replicates across the groups.
    """
    if fsdp_size <= 0 or fsdp_size >= world_size:
        return init_device_mesh(device.type, (world_size,), mesh_dim_names=("fsdp",))
    if world_size % fsdp_size:
        raise RLCoreError(f"{key}={fsdp_size} must divide the number of ranks ({world_size})")
    return init_device_mesh(device.type, (world_size // fsdp_size, fsdp_size), mesh_dim_names=("ddp", "fsdp"))


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated transformer blocks of ``model``: modules whose class is named in ``_no_split_modules``.

    Falls back to the children of any ``layers``/``h``/``blocks`` ``ModuleList``.
    """
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if layers:
        return layers
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and name.rsplit(".", 1)[-1] in ("layers", "h", "blocks"):
            layers.extend(module)
    return layers


def apply_fsdp2(model: nn.Module, mesh: DeviceMesh, fsdp_config: Mapping[str, Any], device: torch.device) -> nn.Module:
    """Shard ``model`` in place with FSDP2: ``fully_shard`` on every decoder layer, then on the root.

    ``fsdp_config`` is a section returned by :func:`resolve_fsdp_config`. Parameters move to ``device``
    as they are sharded (unless the CUDA-only ``offload_policy`` keeps them on the CPU).

    A single CPU rank is not sharded at all: there is nothing to shard over, while FSDP2's DTensor
    parameters and per-layer hooks cost ~1 ms per forward and make AdamW, gradient clipping and the full
    state dict several times slower on small models (bench/vs_trl.py).
    """
    cast_buffers(model, fsdp_config)
    if device.type == "cpu" and mesh.size() == 1:
        return model.to(device)
    kwargs: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": fsdp_config["reshard_after_forward"]}
    if device.type == "cuda":
        policy = mixed_precision_policy(fsdp_config)
        if policy is not None:
            kwargs["mp_policy"] = policy
        if fsdp_config["offload_policy"]:
            kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
    layers = [fully_shard(layer, **kwargs) for layer in decoder_layers(model)]
    fully_shard(model, **kwargs)
    if fsdp_config["forward_prefetch"]:
        for layer, following in zip(layers, layers[1:]):
            layer.set_modules_to_forward_prefetch([following])
    return model


def move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Move every tensor of the optimizer state (Adam moments, step counters) to ``device``."""
    for state in optimizer.state.values():
        for name, value in state.items():
            if isinstance(value, torch.Tensor):
                state[name] = value.to(device, non_blocking=True)


class Offloader:
    """Moves a sharded model and its optimizer state to the CPU between calls (``param_offload``,
    ``optimizer_offload``); a no-op unless the compute device is CUDA and the flag is set."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        fsdp_config: Mapping[str, Any],
        device: torch.device,
    ) -> None:
        """Remember what to move; call :meth:`offload` once after construction to start offloaded."""
        on_cuda = device.type == "cuda" and not fsdp_config["offload_policy"]
        self.model = model
        self.optimizer = optimizer
        self.device = device
        self.params = on_cuda and fsdp_config["param_offload"]
        self.optim = on_cuda and optimizer is not None and fsdp_config["optimizer_offload"]

    def load(self) -> None:
        """Bring the offloaded parts back to the compute device."""
        if self.params:
            self.model.to(self.device)
        if self.optim and self.optimizer is not None:
            move_optimizer_state(self.optimizer, self.device)

    def offload(self) -> None:
        """Move the offloaded parts to the CPU and release cached device memory."""
        if self.params:
            self.model.to("cpu")
        if self.optim and self.optimizer is not None:
            move_optimizer_state(self.optimizer, torch.device("cpu"))
        if self.params or self.optim:
            torch.cuda.empty_cache()

    def __enter__(self) -> Offloader:
        """Load for the duration of a ``with`` block."""
        self.load()
        return self

    def __exit__(self, *exc: object) -> None:
        """Offload again when the block ends, also after an error."""
        self.offload()
