"""The profiling seam: what the core calls around training steps, worker calls and rollouts, and what a
profiler plugin (``rlcore-plugin-profiler``: verl's ``global_profiler`` with torch.profiler, memory snapshots
and NVTX ranges) implements.

A plugin's ``profiler(config)`` hook returns a :class:`Profiler` for a run whose config enables profiling;
:func:`rlcore.plugins.run_profiler` asks for it on the controller and on each worker, and makes it the
process's :func:`current_profiler`. With profiling off the core uses :class:`NoProfiler`, which does nothing.
The core calls:

- on the controller, :meth:`Profiler.step_profiler` once: ``before_step``/``after_step`` around every step;
- on each worker, :meth:`Profiler.worker_profiler` once: ``start``/``stop``/``finish`` when the controller
  says so (the workers' ``start_profile``/``stop_profile``/``finish_profile`` calls) and ``stage(method)``
  around every worker call;
- :meth:`Profiler.call_range` around every timed worker call, :meth:`Profiler.mini_batch` around every
  update mini-batch, and a rollout engine calls :func:`claim_rollout_trace` at the start of a generation.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "EngineTrace",
    "NoProfiler",
    "Profiler",
    "RolloutTrace",
    "StepProfiler",
    "WorkerProfiler",
    "claim_rollout_trace",
    "current_profiler",
    "set_current_profiler",
]


class StepProfiler(Protocol):
    """The controller's side: told before and after each training step (``last``: the run's last step)."""

    def before_step(self, step: int, last: int) -> None:
        """Step ``step`` is about to run."""

    def after_step(self, step: int, last: int) -> None:
        """Step ``step`` is done."""


@runtime_checkable
class WorkerProfiler(Protocol):
    """One worker's side (one rank of one worker group)."""

    def start(self, step: int, kind: str, plan: dict[str, Any]) -> None:
        """Begin profiling ``step`` on this rank of a ``kind`` group (``plan``: the controller's payload)."""

    def stop(self) -> list[str]:
        """End the step's profile; the files written on this rank."""

    def finish(self) -> bool | None:
        """After the run's last profiled step: whatever runs once then; whether it succeeded (None: nothing)."""

    def stage(self, method: str) -> AbstractContextManager[None]:
        """The context worker call ``method`` runs in."""


class EngineTrace(Protocol):
    """An in-process rollout engine's trace of one ``generate`` call."""

    def token(self, index: int) -> None:
        """About to produce response token ``index`` of the current chunk of rows (0: the prefill)."""

    def end_chunk(self) -> None:
        """The current chunk of rows is done."""

    def close(self) -> None:
        """The call is done: write what is still open."""


class RolloutTrace(Protocol):
    """A profiled step's request that the rollout engine trace its own generation."""

    #: the profiled step and the replica's rank (for file names)
    step: int
    rank: int

    @property
    def token_start(self) -> int | None:
        """The first response token traced (None: from the first)."""

    @property
    def token_end(self) -> int | None:
        """The response token the trace stops before (None: to the end)."""

    def engine_trace(self) -> EngineTrace:
        """A trace the engine drives itself (an in-process engine)."""

    def adopt(self, path: Path) -> None:
        """Take a trace file the engine's own profiler wrote (moved into the step's rollout folder)."""


class Profiler(Protocol):
    """A run's profiler (one per process), from a plugin's ``profiler(config)`` hook."""

    def step_profiler(self, groups: Any) -> StepProfiler:
        """The controller's side over the run's worker groups (``rlcore.controller.groups.WorkerGroups``)."""

    def worker_profiler(self, rank: int, device: Any, name: str) -> WorkerProfiler:
        """The side of the worker of rank ``rank`` of group ``name`` on torch ``device``."""

    def call_range(self, method: str) -> AbstractContextManager[None]:
        """The context a timed worker call ``method`` runs in, around its device synchronisation."""

    def mini_batch(self, index: int) -> AbstractContextManager[None]:
        """The context update mini-batch ``index`` runs in."""

    def claim_rollout_trace(self) -> RolloutTrace | None:
        """The rollout trace the running worker call asks this process's engine for, now claimed (None: none)."""


@contextmanager
def _nothing() -> Iterator[None]:
    yield


class NoProfiler:
    """The profiler of a run that profiles nothing: every part of :class:`Profiler` (and of the step and
    worker sides it returns, itself) does nothing."""

    def step_profiler(self, groups: Any) -> NoProfiler:
        """Itself."""
        return self

    def worker_profiler(self, rank: int, device: Any, name: str) -> NoProfiler:
        """Itself."""
        return self

    def before_step(self, step: int, last: int) -> None:
        """Nothing."""

    def after_step(self, step: int, last: int) -> None:
        """Nothing."""

    def start(self, step: int, kind: str, plan: dict[str, Any]) -> None:
        """Nothing."""

    def stop(self) -> list[str]:
        """No files."""
        return []

    def finish(self) -> bool | None:
        """Nothing ran."""
        return None

    def stage(self, method: str) -> AbstractContextManager[None]:
        """An empty context."""
        return _nothing()

    def call_range(self, method: str) -> AbstractContextManager[None]:
        """An empty context."""
        return _nothing()

    def mini_batch(self, index: int) -> AbstractContextManager[None]:
        """An empty context."""
        return _nothing()

    def claim_rollout_trace(self) -> None:
        """No request."""
        return None


_CURRENT: Profiler = NoProfiler()


def current_profiler() -> Profiler:
    """This process's profiler (:class:`NoProfiler` until a run's profiler is set)."""
    return _CURRENT


def set_current_profiler(profiler: Profiler) -> Profiler:
    """Make ``profiler`` this process's; returns it."""
    global _CURRENT
    _CURRENT = profiler
    return profiler


def claim_rollout_trace() -> RolloutTrace | None:
    """For a rollout engine at the start of a generation: the trace a profiled step asks it to write (a
    discrete rollout stage), now claimed; None when none is asked for."""
    return _CURRENT.claim_rollout_trace()
