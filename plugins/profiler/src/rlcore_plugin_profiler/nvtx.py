"""NVTX ranges for ``global_profiler.tool=nsys``: while a chosen step is profiled on a CUDA rank, every worker
method call is an NVTX range named after the method (``update_actor``, ``generate_sequences``, ...), inside a
``step<N>`` range, and the step is bracketed by ``cudaProfilerStart``/``cudaProfilerStop`` so that
``nsys profile --capture-range=cudaProfilerApi`` records the chosen steps only. The user launches the run under
``nsys``; rlcore only marks the ranges. Nothing is recorded on the CPU (NVTX is a CUDA tool).
"""

from __future__ import annotations

__all__ = ["active", "begin_step", "end_step", "pop_range", "push_range"]

_ACTIVE = False


def active() -> bool:
    """Whether this process marks NVTX ranges now (a chosen step of an nsys run on CUDA)."""
    return _ACTIVE


def begin_step(step: int) -> None:
    """Start capturing (``cudaProfilerStart``) and open the ``step<N>`` range; call on a CUDA rank only."""
    global _ACTIVE
    import torch

    torch.cuda.profiler.start()
    torch.cuda.nvtx.range_push(f"step{step}")
    _ACTIVE = True


def end_step() -> None:
    """Close the step's range and stop capturing (``cudaProfilerStop``); a no-op when no step is open."""
    global _ACTIVE
    if not _ACTIVE:
        return
    import torch

    _ACTIVE = False
    torch.cuda.nvtx.range_pop()
    torch.cuda.profiler.stop()


def push_range(name: str) -> bool:
    """Open an NVTX range ``name`` when :func:`active`; whether one was opened (pass it to :func:`pop_range`)."""
    if not _ACTIVE:
        return False
    import torch

    torch.cuda.nvtx.range_push(name)
    return True


def pop_range(opened: bool) -> None:
    """Close the range :func:`push_range` opened (nothing when it opened none)."""
    if opened:
        import torch

        torch.cuda.nvtx.range_pop()
