"""The workers' side of step profiling (:mod:`rlcore.profiling.plan` reads the config and says when).

A worker keeps one :class:`WorkerProfiler`; ``start(step, kind, plan)`` begins a trace when this rank is one
the plan profiles for its group kind, ``stop()`` writes the files under ``{save_path}/step{N}/``.

``torch.profiler`` allows one session per process, so workers that share a process (the ``local`` executor
holds every group in the controller's) share one session: the first to start opens it, the last to stop
writes it, named after all of them (``actor_rollout+critic_rank0.trace.json``). Under Ray every rank is a
process of its own and writes its own files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlcore.profiling import nvtx

__all__ = ["WorkerProfiler"]


class _Session:
    """The process's one ``torch.profiler`` session and the workers inside it."""

    def __init__(self, profiler: Any, tool: str, folder: Path) -> None:
        self.profiler = profiler
        self.tool = tool
        self.folder = folder
        self.members: list[str] = []
        self.open = 0


_SESSION: _Session | None = None


class WorkerProfiler:
    """Profiles the steps the controller marks on one rank.

    Args:
        rank: this worker's rank in its group.
        device: the worker's torch device (CUDA decides between memory snapshots and the CPU profiler).
        name: the group's name in file names (e.g. ``actor_rollout``).
    """

    def __init__(self, rank: int, device: Any, name: str) -> None:
        self.rank = rank
        self.device = device
        self.name = name
        self._memory_history = False
        self._folder: Path | None = None
        self._in_session = False

    def _cuda(self) -> bool:
        return getattr(self.device, "type", str(self.device)) == "cuda"

    def start(self, step: int, kind: str, plan: dict[str, Any]) -> None:
        """Begin profiling ``step`` when the plan profiles this rank of group ``kind``."""
        global _SESSION
        import torch

        ranks = plan["ranks"].get(kind, [])
        if ranks is not None and self.rank not in ranks:
            return
        tool = plan["tool"]
        if tool == "nsys":  # NVTX ranges on CUDA; on the CPU nothing is recorded (the run plan says so)
            if self._cuda():
                nvtx.begin_step(step)
            return
        folder = Path(plan["save_path"]) / f"step{step}"
        folder.mkdir(parents=True, exist_ok=True)
        if tool == "torch_memory" and self._cuda():
            if not self._memory_history:
                torch.cuda.memory._record_memory_history(**plan["memory_options"])
                self._memory_history = True
            self._folder = folder
            return
        if _SESSION is None:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self._cuda():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            memory = tool == "torch_memory"
            profiler = torch.profiler.profile(activities=activities, profile_memory=memory, record_shapes=memory)
            profiler.__enter__()
            _SESSION = _Session(profiler, tool, folder)
        _SESSION.members.append(f"{self.name}_rank{self.rank}")
        _SESSION.open += 1
        self._in_session = True

    def stop(self) -> list[str]:
        """End this worker's part of the trace; the files written (by the last worker of a shared session)."""
        global _SESSION
        import torch

        nvtx.end_step()
        if self._folder is not None:  # CUDA memory history: dump the snapshot after the step
            folder, self._folder = self._folder, None
            path = str(folder / f"{self.name}_rank{self.rank}.memory_snapshot.pickle")
            torch.cuda.memory._dump_snapshot(path)
            return [path]
        if not self._in_session or _SESSION is None:
            return []
        self._in_session = False
        session = _SESSION
        session.open -= 1
        if session.open:
            return []
        _SESSION = None
        session.profiler.__exit__(None, None, None)
        stem = session.folder / "+".join(dict.fromkeys(session.members))
        if session.tool == "torch":
            path = f"{stem}.trace.json"
            session.profiler.export_chrome_trace(path)
            return [path]
        trace, table = f"{stem}.memory.trace.json", f"{stem}.memory.txt"
        session.profiler.export_chrome_trace(trace)
        Path(table).write_text(session.profiler.key_averages().table(sort_by="self_cpu_memory_usage", row_limit=50))
        return [trace, table]
