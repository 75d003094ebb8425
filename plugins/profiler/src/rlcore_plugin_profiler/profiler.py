"""The plugin's :class:`rlcore.api.Profiler`: the run's :class:`~rlcore_plugin_profiler.plan.ProfilePlan` on the
controller, a :class:`~rlcore_plugin_profiler.worker.WorkerProfiler` per worker, NVTX ranges around worker calls
(:mod:`rlcore_plugin_profiler.nvtx`), rows per update mini-batch and the rollout engines' own traces
(:mod:`rlcore_plugin_profiler.rollout`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from rlcore_plugin_profiler import nvtx
from rlcore_plugin_profiler.plan import StepProfiling, profile_plan, step_profiling
from rlcore_plugin_profiler.rollout import RolloutTraceRequest, claim
from rlcore_plugin_profiler.worker import WorkerProfiler, mini_batch

__all__ = ["GlobalProfiler"]


@contextmanager
def _call_range(method: str) -> Iterator[None]:
    opened = nvtx.push_range(method)
    try:
        yield
    finally:
        nvtx.pop_range(opened)


class GlobalProfiler:
    """verl's ``global_profiler`` for a run of ``config`` whose ``global_profiler.tool`` is set."""

    def __init__(self, config: Any) -> None:
        self.config = config

    def step_profiler(self, groups: Any) -> StepProfiling:
        """The controller's side: starts and stops the chosen steps on the profiled worker groups."""
        plan = profile_plan(self.config)
        assert plan is not None, "the profiler hook answers only when global_profiler.tool is set"
        return step_profiling(plan, groups)

    def worker_profiler(self, rank: int, device: Any, name: str) -> WorkerProfiler:
        """The side of one worker (rank ``rank`` of group ``name``)."""
        return WorkerProfiler(rank, device, name)

    def call_range(self, method: str) -> AbstractContextManager[None]:
        """An NVTX range named ``method`` while an nsys step is profiled on a CUDA rank (else nothing)."""
        return _call_range(method)

    def mini_batch(self, index: int) -> AbstractContextManager[None]:
        """A ``mini_batch<index>`` row of the trace being recorded (advancing its schedule)."""
        return mini_batch(index)

    def claim_rollout_trace(self) -> RolloutTraceRequest | None:
        """The discrete rollout trace the running ``generate_sequences`` asks the engine for, now claimed."""
        return claim()
