"""What a worker-method call cost: its seconds and, on CUDA, the peak device memory it used.

Both executors measure each call where it runs with :class:`CallMeter` (the local group around the method,
a Ray actor inside ``execute``) and keep the figures per method in a :class:`CallLedger`, which the trainer
empties once per step into ``timing_worker_s/<method>`` and ``perf/max_memory_{allocated,reserved}_gb/<method>``.
The CUDA peaks are reset when a call starts, so each method's figure is its own peak
(``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``). A process that has not used CUDA reports
no memory (CPU runs report their RSS in ``summary.json`` instead). CUDA work is asynchronous: where CUDA is in
use the device is synchronized before the clock starts and before it is read, so a call's seconds include
the kernels it queued and not those queued before it (on the CPU nothing is synchronized).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from rlcore.api.profiling import WorkerProfiler, current_profiler

__all__ = ["CallLedger", "CallMeter", "CallStats", "worker_stage"]

GIB = 2**30


@dataclass(frozen=True)
class CallStats:
    """One call on one rank: wall seconds and, on CUDA, the peak GiB allocated and reserved during it."""

    seconds: float
    max_allocated_gb: float | None = None
    max_reserved_gb: float | None = None


def _cuda_in_use() -> Any:
    """``torch.cuda`` when this process has initialised CUDA (torch imported and a device used), else None."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch.cuda


class CallMeter:
    """``with CallMeter() as meter: ...`` measures the block; ``meter.stats`` holds the :class:`CallStats`."""

    def __init__(self, method: str = "") -> None:
        """Nothing measured yet; ``method`` names the call for the run's profiler (an NVTX range with nsys)."""
        self.stats = CallStats(0.0)
        self._start = 0.0
        self.method = method
        self._range: AbstractContextManager[None] = nullcontext()

    def __enter__(self) -> CallMeter:
        """Enter the profiler's context of the call (an NVTX range when an nsys step is profiled), finish the
        device's queued work and reset the CUDA memory peaks (when CUDA is in use) and start the clock."""
        self._range = current_profiler().call_range(self.method or "worker_call")
        self._range.__enter__()
        cuda = _cuda_in_use()
        if cuda is not None:
            cuda.synchronize()
            cuda.reset_peak_memory_stats()
        self._start = time.perf_counter()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Record the seconds (when CUDA is in use and the block did not raise, after the device finished the
        call's work) and the CUDA peaks (also when the block raised); leave the profiler's context."""
        cuda = _cuda_in_use()
        if cuda is not None and exc_type is None:
            cuda.synchronize()
        seconds = time.perf_counter() - self._start
        self._range.__exit__(exc_type, exc, tb)
        if cuda is None:
            self.stats = CallStats(seconds)
        else:
            self.stats = CallStats(seconds, cuda.max_memory_allocated() / GIB, cuda.max_memory_reserved() / GIB)


def worker_stage(worker: Any, method: str) -> AbstractContextManager[None]:
    """The context ``worker``'s call ``method`` runs in: its profiler's stage (nothing for a worker without a
    :class:`~rlcore.api.profiling.WorkerProfiler`)."""
    profiler = getattr(worker, "profiler", None)
    return profiler.stage(method) if isinstance(profiler, WorkerProfiler) else nullcontext()


class CallLedger:
    """Per worker method since the last pop: the seconds (summed over calls; of a call, its slowest rank)
    and the peak memory (the largest of any call and rank)."""

    def __init__(self) -> None:
        """An empty ledger."""
        self.seconds: dict[str, float] = {}
        self.memory_gb: dict[str, tuple[float, float]] = {}

    def add(self, method: str, ranks: Sequence[CallStats]) -> None:
        """Record one call of ``method``, measured on each of its ``ranks``."""
        self.seconds[method] = self.seconds.get(method, 0.0) + max((s.seconds for s in ranks), default=0.0)
        peaks = [(s.max_allocated_gb, s.max_reserved_gb) for s in ranks if s.max_allocated_gb is not None]
        if peaks:
            allocated = max(float(a) for a, _ in peaks)
            reserved = max(float(r or 0.0) for _, r in peaks)
            before = self.memory_gb.get(method, (0.0, 0.0))
            self.memory_gb[method] = (max(before[0], allocated), max(before[1], reserved))

    def pop_seconds(self) -> dict[str, float]:
        """``{method: seconds}`` since the last call, and reset."""
        out, self.seconds = self.seconds, {}
        return out

    def pop_memory_gb(self) -> dict[str, tuple[float, float]]:
        """``{method: (peak GiB allocated, peak GiB reserved)}`` since the last call (CUDA only), and reset."""
        out, self.memory_gb = self.memory_gb, {}
        return out
