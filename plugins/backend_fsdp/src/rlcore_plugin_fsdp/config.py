"""The ``fsdp_config`` section (verl's key names) as a typed section with its defaults, mounted under the
actor, the reference model, the critic and the reward model (torch-free: the hooks module returns it from
``config_defaults``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcore.api import Section


@dataclass(frozen=True)
class MixedPrecisionConfig(Section):
    """``<role>.fsdp_config.mixed_precision`` (verl's spelling): the dtypes of FSDP mixed precision other than
    the compute dtype, which is ``fsdp_config.dtype`` (verl's ``mixed_precision.param_dtype`` is renamed to it)."""

    #: CUDA only, as dtype: gradients are reduced across ranks in this dtype (FSDP2 MixedPrecisionPolicy);
    #: null: fp32 when dtype differs from model_dtype, else model_dtype
    reduce_dtype: str | None = None
    #: dtype the model's floating-point buffers (rotary inv_freq, ...) are kept in; null: model_dtype
    buffer_dtype: str | None = None


@dataclass(frozen=True)
class FSDPConfig(Section):
    """``<role>.fsdp_config``: how the FSDP2 backend shards, offloads and casts a role's model."""

    #: CUDA only: keep the sharded parameters on the CPU between calls
    param_offload: bool = False
    #: CUDA only: keep the optimizer state on the CPU between calls
    optimizer_offload: bool = False
    #: CUDA only: FSDP2 CPUOffloadPolicy (parameters live on the CPU, copied in per layer)
    offload_policy: bool = False
    #: free the gathered parameters after each layer's forward (ZeRO-3); false keeps them (ZeRO-2)
    reshard_after_forward: bool = True
    #: ranks per shard group; -1 = all ranks, a smaller divisor gives HSDP (a ("ddp", "fsdp") mesh)
    fsdp_size: int = -1
    #: prefetch the next layer's parameters during forward
    forward_prefetch: bool = False
    #: dtype the parameters (master weights) are loaded and kept in
    model_dtype: str = "fp32"
    #: compute dtype: of an FSDP2 MixedPrecisionPolicy on CUDA, and on CPU with cpu_autocast
    dtype: str = "bf16"
    #: on CPU, run the forward passes under torch.autocast("cpu", dtype); dtype must be bf16 or fp16
    cpu_autocast: bool = False
    #: verl's: torch deterministic algorithms (warn-only), deterministic cuDNN/cuBLAS/NCCL/flash-attention settings in
    #: the worker process, before the model is built
    full_determinism: bool = False
    #: verl's FSDP mixed-precision dtypes (param_dtype is dtype)
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)
