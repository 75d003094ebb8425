"""The accelerators the planner knows: memory, dense bf16 throughput and memory bandwidth.

The figures are the vendors' datasheet numbers for the parts named (dense bf16, no sparsity: the FLOP/s of
the table that ``perf/mfu`` is measured against);
``cpu`` is a nominal figure for a small host (it makes ``rlcore plan --gpu cpu`` give an order of magnitude,
not a promise). :func:`detect_device` names the GPU of this machine without importing torch.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import asdict, dataclass
from typing import Any

from rlcore.api import RLCoreError, table_peak_flops

GIB = 2**30


@dataclass(frozen=True)
class Device:
    """One accelerator of the table."""

    name: str
    description: str
    memory_bytes: int
    bf16_flops: float
    bandwidth: float  # bytes per second

    def as_dict(self) -> dict[str, Any]:
        """The device as plain JSON data."""
        return asdict(self)


def _gpu(name: str, description: str, memory_gib: int, bandwidth: float) -> Device:
    """A GPU of the table; its dense bf16 FLOP/s from :data:`rlcore.tracking.device_peak.GPU_PEAK_TFLOPS` (the
    table MFU is measured against), looked up by ``description``."""
    flops = table_peak_flops(description)
    assert flops is not None, description
    return Device(name, description, memory_gib * GIB, flops, bandwidth)


#: the named devices of ``rlcore plan --gpu``
DEVICES: dict[str, Device] = {
    "h100": _gpu("h100", "NVIDIA H100 SXM 80GB", 80, 3.35e12),
    "h200": _gpu("h200", "NVIDIA H200 SXM 141GB", 141, 4.8e12),
    "a100": _gpu("a100", "NVIDIA A100 SXM 80GB", 80, 2.04e12),
    "l40s": _gpu("l40s", "NVIDIA L40S 48GB", 48, 0.864e12),
    "cpu": Device("cpu", "a CPU host (nominal: 16 GiB, 1 TFLOP/s, 50 GB/s)", 16 * GIB, 1e12, 50e9),
}


def device_named(name: str) -> Device:
    """The table's device ``name`` (case-insensitive), else an error listing the known names."""
    device = DEVICES.get(name.lower())
    if device is None:
        raise RLCoreError(f"--gpu {name}: unknown device; known: {', '.join(DEVICES)}")
    return device


def match_gpu_name(gpu_name: str) -> str | None:
    """The table's name for a GPU product name such as ``NVIDIA H100 80GB HBM3`` (None when unknown)."""
    upper = gpu_name.upper()
    for name in ("h200", "h100", "a100", "l40s"):
        if name.upper() in upper:
            return name
    return None


def detect_device() -> str:
    """The table's name of this machine's GPU from ``nvidia-smi``; ``cpu`` without one. A GPU not in the
    table is an error asking for ``--gpu``."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "cpu"
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "cpu"
    first = out.strip().splitlines()[0] if out.strip() else ""
    if not first:
        return "cpu"
    name = match_gpu_name(first)
    if name is None:
        raise RLCoreError(f"this machine's GPU ({first}) is not in the planner's table; pass --gpu {'|'.join(DEVICES)}")
    return name
