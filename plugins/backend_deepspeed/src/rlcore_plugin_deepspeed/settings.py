"""The ``deepspeed_config`` sections (verl's engine key names) and the DeepSpeed JSON config they become.

``zero_stage`` (1, 2, 3) picks what ZeRO partitions over the data-parallel ranks: optimizer state (1), also
gradients (2), also parameters (3). ``offload: cpu`` moves the optimizer state (and at stage 3 the
parameters) to host memory; it needs a CUDA device (on a CPU run everything is in host memory already)
and verl's ``nvme``/``auto`` are rejected (they need DeepSpeed's ``async_io`` op and libaio). ``dtype`` is
the compute dtype: ``bf16`` (DeepSpeed's bf16 mode: bf16 weights and activations, fp32 master weights in
the optimizer) or ``fp32``; null means bf16 on CUDA and fp32 on CPU (as the FSDP backend computes).

Gradient accumulation and clipping are rlcore's (:mod:`rlcore.workers.ppo_loop`): the JSON config turns
DeepSpeed's own off (``managed_gradient_accumulation: false``, ``gradient_clipping: 0``) and the engine
sets the clip norm of each step itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from rlcore.api import RLCoreError, parse_dtype
from rlcore_plugin_deepspeed.config import DeepSpeedConfig

ZERO_STAGES = (1, 2, 3)
OFFLOADS = ("none", "cpu")
#: the largest number of elements :meth:`~rlcore_plugin_deepspeed.engine.DeepSpeedEngine.full_weights`
#: gathers at once under ZeRO-3 (one bucket of parameters)
GATHER_BUCKET_NUMEL = 64 * 1024 * 1024


@dataclass(frozen=True)
class DeepSpeedSettings:
    """A resolved ``deepspeed_config`` section.

    Attributes:
        zero_stage: 1, 2 or 3.
        offload: ``none`` or ``cpu``.
        dtype: the compute dtype (float32 or bfloat16).
    """

    zero_stage: int
    offload: str
    dtype: torch.dtype


def resolve_settings(section: Mapping[str, Any] | None, key: str, device_type: str) -> DeepSpeedSettings:
    """The ``deepspeed_config`` section at ``key`` merged over the plugin defaults and checked for a run on
    ``device_type`` (``cpu``/``cuda``); every error names its key."""
    resolved = DeepSpeedConfig().tree()
    for name, value in (section or {}).items():
        if name not in resolved:
            raise RLCoreError(f"unknown key {key}.{name}; known keys: {', '.join(DeepSpeedConfig().tree())}")
        resolved[name] = value
    stage = resolved["zero_stage"]
    if isinstance(stage, bool) or stage not in ZERO_STAGES:
        raise RLCoreError(f"{key}.zero_stage must be 1, 2 or 3, got {stage!r}")
    offload = str(resolved["offload"]).lower()
    if offload in ("nvme", "auto"):
        raise RLCoreError(
            f"{key}.offload={offload!r} is not supported: NVMe offload needs DeepSpeed's async_io op (libaio); "
            "use none or cpu"
        )
    if offload not in OFFLOADS:
        raise RLCoreError(f"{key}.offload must be none or cpu, got {resolved['offload']!r}")
    if offload == "cpu" and device_type != "cuda":
        raise RLCoreError(
            f"{key}.offload=cpu needs a CUDA device: on a {device_type} run the parameters and the optimizer "
            "state are in host memory already; use none"
        )
    if resolved["dtype"] is None:
        dtype = torch.bfloat16 if device_type == "cuda" else torch.float32
    else:
        dtype = parse_dtype(resolved["dtype"], f"{key}.dtype")
    if dtype not in (torch.float32, torch.bfloat16):
        raise RLCoreError(f"{key}.dtype must be bf16 or fp32 (or null), got {resolved['dtype']!r}")
    return DeepSpeedSettings(stage, offload, dtype)


def deepspeed_json(settings: DeepSpeedSettings, *, trainable: bool) -> dict[str, Any]:
    """The DeepSpeed config of an engine: ZeRO stage and offload, bf16 mode, and DeepSpeed's accumulation,
    clipping and progress logging turned off (rlcore's PPO loop owns them). A frozen model (``trainable``
    false) has no optimizer state or gradients to partition: below stage 3 it is simply replicated."""
    stage = settings.zero_stage if trainable or settings.zero_stage == 3 else 0
    zero: dict[str, Any] = {"stage": stage, "overlap_comm": stage == 3}
    if settings.offload == "cpu":
        if trainable:
            zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if stage == 3:
            zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "gradient_clipping": 0.0,
        "zero_optimization": zero,
        "bf16": {"enabled": settings.dtype == torch.bfloat16},
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 2**62,
        "wall_clock_breakdown": False,
    }
