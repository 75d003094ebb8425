"""The peak FLOPS of one device, the denominator of MFU (:mod:`rlcore.tracking.flops`).

- A known GPU computing in bfloat16 or float16: the vendor's dense (no sparsity) tensor-core peak from
  :data:`GPU_PEAK_TFLOPS`, matched on ``torch.cuda.get_device_name()``.
- Anything else (a CPU, an unknown GPU, float32): a short matmul probe in the compute dtype, measured once per
  machine and cached in ``$RLCORE_CACHE/peak_flops.json`` (default ``~/.cache/rlcore``), keyed by the device's
  name, the torch version, the dtype and, on a CPU, the number of torch threads. A probe measures what
  matmuls reach on that device, not a datasheet figure, so an MFU against it reads higher than one against
  a vendor peak.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

__all__ = ["GPU_PEAK_TFLOPS", "DevicePeak", "device_peak", "probe_matmul_flops", "table_peak_flops"]

#: dense bfloat16/float16 tensor-core TFLOPS by device-name pattern, the more specific patterns first
GPU_PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    (r"\bH100\b.*\bPCIe\b", 756.0),
    (r"\bH100 NVL\b", 835.0),
    (r"\bH200 NVL\b", 835.0),
    (r"\bGH200\b", 989.0),
    (r"\bH100\b", 989.0),
    (r"\bH200\b", 989.0),
    (r"\bH800\b", 989.0),
    (r"\bH20\b", 148.0),
    (r"\bGB200\b", 2500.0),
    (r"\bB200\b", 2250.0),
    (r"\bA100\b", 312.0),
    (r"\bA800\b", 312.0),
    (r"\bL40S\b", 362.0),
    (r"\bL40\b", 181.0),
    (r"\bL4\b", 121.0),
    (r"\bA40\b", 149.7),
    (r"\bA10\b", 125.0),
    (r"\bMI300X\b", 1307.4),
)
#: matmul side of the probe: large enough to reach the device's matmul rate, small enough for a slow CPU
PROBE_SIZE = {"cpu": 512, "cuda": 8192}
#: seconds of timed matmuls per probe round (three rounds, the best counts)
PROBE_SECONDS = 0.25


@dataclass(frozen=True)
class DevicePeak:
    """One device's peak: its name, the dtype it computes in, FLOP/s and where the figure came from
    (``table``, ``probe``: measured now, or ``cache``: measured before on this machine)."""

    device: str
    dtype: str
    flops: float
    source: str

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict with the peak in TFLOPS (written into ``derived.json`` as ``device_peak``)."""
        out = asdict(self)
        out["tflops"] = round(out.pop("flops") / 1e12, 6)
        return out


def table_peak_flops(device_name: str) -> float | None:
    """The dense bf16/fp16 peak FLOP/s of ``device_name`` from :data:`GPU_PEAK_TFLOPS`, or None."""
    for pattern, tflops in GPU_PEAK_TFLOPS:
        if re.search(pattern, device_name):
            return tflops * 1e12
    return None


def _cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``, else ``platform.processor()``)."""
    import platform

    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "cpu"


def device_name(device: torch.device) -> str:
    """A readable name of ``device``: the GPU's name, or the CPU's model."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return _cpu_name()


def probe_matmul_flops(device: torch.device, dtype: torch.dtype) -> float:
    """The best FLOP/s of square matmuls in ``dtype`` on ``device`` over three rounds of :data:`PROBE_SECONDS`."""
    import torch

    size = PROBE_SIZE.get(device.type, PROBE_SIZE["cpu"])
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, generator=generator).to(dtype)
    b = torch.randn(size, size, device=device, generator=generator).to(dtype)

    def sync() -> None:
        """Wait for the device's queued work."""
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    torch.matmul(a, b)
    sync()
    best = 0.0
    for _ in range(3):
        count, start = 0, time.perf_counter()
        while True:
            torch.matmul(a, b)
            count += 1
            sync()
            elapsed = time.perf_counter() - start
            if elapsed >= PROBE_SECONDS:
                break
        best = max(best, 2.0 * size**3 * count / elapsed)
    return best


def _cache_file() -> Path:
    """Where measured peaks are kept: ``$RLCORE_CACHE/peak_flops.json`` (default ``~/.cache/rlcore``)."""
    return Path(os.environ.get("RLCORE_CACHE", Path.home() / ".cache" / "rlcore")) / "peak_flops.json"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path.lock`` (ranks of one machine probe one after another)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as handle:
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock, at worst two ranks probe at once
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _cached_probe(key: str, device: torch.device, dtype: torch.dtype) -> tuple[float, str]:
    """The cached probe figure for ``key``, else a new probe stored under it; returns ``(flops, source)``."""
    path = _cache_file()
    try:
        with _locked(path):
            entries = json.loads(path.read_text()) if path.is_file() else {}
            if isinstance(entries.get(key), (int, float)) and entries[key] > 0:
                return float(entries[key]), "cache"
            flops = probe_matmul_flops(device, dtype)
            entries[key] = flops
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(entries, indent=2, sort_keys=True))
            os.replace(tmp, path)
            return flops, "probe"
    except (OSError, ValueError) as exc:  # unwritable cache or a damaged file: measure without caching
        log.warning("peak-FLOPS cache %s not usable (%s): probing without it", path, exc)
        return probe_matmul_flops(device, dtype), "probe"


def device_peak(device: torch.device, dtype: torch.dtype) -> DevicePeak:
    """The peak of ``device`` computing in ``dtype``: the table for a known GPU in bf16/fp16, else the
    cached matmul probe (see the module docstring)."""
    import torch

    name = device_name(device)
    dtype_name = str(dtype).removeprefix("torch.")
    if device.type == "cuda" and dtype in (torch.bfloat16, torch.float16):
        flops = table_peak_flops(name)
        if flops is not None:
            return DevicePeak(name, dtype_name, flops, "table")
    key = f"{device.type}|{name}|torch {torch.__version__}|{dtype_name}"
    if device.type == "cpu":
        key += f"|threads {torch.get_num_threads()}"
    flops, source = _cached_probe(key, device, dtype)
    return DevicePeak(name, dtype_name, flops, source)
