"""The workers' side of step profiling (:mod:`rlcore_plugin_profiler.plan` reads the config and says when).

A worker keeps one :class:`WorkerProfiler`; ``start(step, kind, plan)`` marks the step when this rank is one
the plan profiles for its group kind, every worker call of the step runs inside :meth:`WorkerProfiler.stage`,
and ``stop()`` writes the files under ``{save_path}/step{N}/``.

With ``tool=torch`` (or ``npu``, recorded the same way: :mod:`rlcore_plugin_profiler.npu`) each call is a stage
of a role (``generate_sequences``: the rollout,
``compute_ref_log_prob``: the reference, any other: the group's own training role), traced as that role's
``profiler.tool_config.torch`` says (:mod:`rlcore_plugin_profiler.torch_options`):

- continuous (``discrete=false``): one session per step, opened at the first traced stage, in which every
  stage is a ``record_function`` row named after the call and every update mini-batch a ``mini_batch<i>``
  row (:func:`mini_batch`); written as ``{group}_rank{r}.trace.json``;
- discrete: each stage of :data:`STAGES` in a session of its own, ``{group}_rank{r}.{stage}.trace.json``; a
  discrete rollout stage is traced by the rollout engine itself (:mod:`rlcore_plugin_profiler.rollout`).

``torch.profiler`` allows one session per process, so workers that share a process (the ``local`` executor
holds every group in the controller's) share the continuous session: it is written once the last of them
stops, named after all of them (``actor_rollout+critic_rank0.trace.json``), and a stage that asks for a trace
of its own while that session is open is a row in it instead (a warning says so). Under Ray every rank is a
process of its own and writes its own files.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rlcore_plugin_profiler import nvtx
from rlcore_plugin_profiler.finish import relocate_rollout_traces, rollout_trace_dir, run_finish_hook
from rlcore_plugin_profiler.plan import TRACED
from rlcore_plugin_profiler.rollout import RolloutTraceRequest, requesting, unique_path
from rlcore_plugin_profiler.torch_options import TorchOptions

__all__ = ["STAGES", "WorkerProfiler", "mini_batch"]

log = logging.getLogger(__name__)

#: the calls that get a trace of their own in discrete mode (verl's annotated stages); others are rows of
#: a continuous trace only
STAGES = frozenset(
    {
        "generate_sequences",
        "compute_log_prob",
        "compute_ref_log_prob",
        "update_actor",
        "sync_weights",
        "compute_values",
        "update_critic",
        "compute_rm_score",
    }
)
#: the calls that run the update loop, whose mini-batches a schedule sub-samples
UPDATES = frozenset({"update_actor", "update_critic"})
#: the calls that steer profiling itself and are never traced
_CONTROL = frozenset({"start_profile", "stop_profile"})


def _role(kind: str, method: str) -> str:
    """The role whose settings trace ``method`` of a ``kind`` worker group."""
    if kind == "actor" and method == "generate_sequences":
        return "rollout"
    if kind == "actor" and method == "compute_ref_log_prob":
        return "ref"
    return "train"


def _schedule(kwargs: dict[str, int]) -> Any:
    import torch

    with warnings.catch_warnings():  # torch warns about warmup=0, which verl's schedules use on purpose
        warnings.simplefilter("ignore")
        return torch.profiler.schedule(**kwargs)


class _Session:
    """One ``torch.profiler`` session and how it is written: to ``stem()`` + ``suffix``, once per recorded
    window when a schedule cuts it (later windows ``.cycle<k>``; a window opened after the last mini-batch,
    which holds none, is not written)."""

    def __init__(
        self,
        kwargs: dict[str, Any],
        schedule: dict[str, int] | None,
        folder: Path,
        stem: Callable[[], str],
        suffix: str = ".trace.json",
    ) -> None:
        import torch

        self.folder = folder
        self.stem = stem
        self.suffix = suffix
        self.written: list[str] = []
        self.scheduled = schedule is not None
        self._closing = False
        self._steps = 0  # mini-batches since the last write
        extra: dict[str, Any] = {}
        if schedule is not None:
            extra = {"schedule": _schedule(schedule), "on_trace_ready": self._write}
        self.profiler = torch.profiler.profile(**kwargs, **extra)
        self.profiler.__enter__()

    def _write(self, profiler: Any) -> None:
        if self._closing and self.scheduled and self.written and not self._steps:
            return
        self._steps = 0
        cycle = f".cycle{len(self.written)}" if self.written else ""
        path = unique_path(self.folder, self.stem() + cycle, self.suffix)
        profiler.export_chrome_trace(str(path))
        self.written.append(str(path))

    def step(self) -> None:
        """One mini-batch of the update loop is done (advances a schedule)."""
        if self.scheduled:
            self._steps += 1
            self.profiler.step()

    def close(self) -> list[str]:
        """Stop the session and write what it recorded; the files it wrote."""
        self._closing = True
        self.profiler.__exit__(None, None, None)
        if not self.scheduled:
            self._write(self.profiler)
        elif not self.written:
            _warn_once(
                f"{self.stem()}: the update loop ended before the profiler schedule's first window (skip_first + "
                "wait + warmup mini-batches), so no trace was written"
            )
        return self.written


class _Step:
    """The profiled step of this process: its folder, the workers in it and the continuous session (opened
    by the first traced stage; its schedule is that stage's worker's, advanced by that worker's
    mini-batches)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.members: list[str] = []
        self.open = 0
        self.session: _Session | None = None
        self.owner: WorkerProfiler | None = None

    def stem(self) -> str:
        return "+".join(dict.fromkeys(self.members))


_STEP: _Step | None = None
#: the session ``mini_batch`` advances now and the worker whose stage runs in it
_STEPPING: tuple[_Session, WorkerProfiler] | None = None
_CURRENT: WorkerProfiler | None = None
_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning(message)


@contextlib.contextmanager
def mini_batch(index: int) -> Iterator[None]:
    """Run update mini-batch ``index`` as a ``mini_batch<index>`` row of the trace being recorded, then advance
    the schedule that sub-samples the update loop (when one does); nothing when no profiled step runs."""
    if _CURRENT is None:
        yield
        return
    import torch

    with torch.profiler.record_function(f"mini_batch{index}"):
        yield
    if _STEPPING is not None and _STEPPING[1] is _CURRENT:
        _STEPPING[0].step()


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
        self._snapshot = False
        self._step: _Step | None = None
        self._plan: dict[str, Any] = {}
        self._kind = ""
        self._step_number = 0
        self._written: list[str] = []
        self._hook = False

    def _cuda(self) -> bool:
        return getattr(self.device, "type", str(self.device)) == "cuda"

    @property
    def member(self) -> str:
        """This worker's name in file names: ``{group}_rank{r}``."""
        return f"{self.name}_rank{self.rank}"

    def _runs_hook(self, plan: dict[str, Any], profiled: bool) -> bool:
        hook = plan.get("hook") or {}
        if not plan.get("final") or not hook.get("cmd"):
            return False
        if hook.get("all_ranks"):
            return True
        return self.rank in hook["ranks"] if hook.get("ranks") else profiled

    def start(self, step: int, kind: str, plan: dict[str, Any]) -> None:
        """Begin profiling ``step`` when the plan profiles this rank of group ``kind``."""
        global _STEP
        import torch

        ranks = plan["ranks"].get(kind, [])
        profiled = ranks is None or self.rank in ranks
        self._hook = self._runs_hook(plan, profiled)
        self._plan = plan
        if not profiled:
            return
        tool = plan["tool"]
        if tool == "nsys":  # NVTX ranges on CUDA; on the CPU nothing is recorded (the run plan says so)
            if self._cuda():
                nvtx.begin_step(step)
            return
        folder = Path(plan["save_path"]) / f"step{step}"
        folder.mkdir(parents=True, exist_ok=True)
        self._folder = folder
        if tool == "torch_memory" and self._cuda():
            if not self._memory_history:
                torch.cuda.memory._record_memory_history(**plan["memory_options"])
                self._memory_history = True
            self._snapshot = True
            return
        if _STEP is None:
            _STEP = _Step(folder)
        _STEP.members.append(self.member)
        _STEP.open += 1
        self._step = _STEP
        self._kind = kind
        self._step_number = step
        if tool == "torch_memory" and _STEP.session is None:  # CPU: the whole step under a memory profile
            kwargs = {
                "activities": [torch.profiler.ProfilerActivity.CPU],
                "profile_memory": True,
                "record_shapes": True,
            }
            _STEP.session = _Session(kwargs, None, folder, _STEP.stem, ".memory.trace.json")

    def _options(self, role: str) -> TorchOptions:
        return TorchOptions.from_dict(self._plan["options"][self._kind][role])

    @contextlib.contextmanager
    def stage(self, method: str) -> Iterator[None]:
        """Run worker call ``method`` as its role's settings say while this rank profiles a step with the torch
        tool (see the module docstring); otherwise just run it."""
        global _CURRENT
        step = self._step
        if step is None or method in _CONTROL or self._plan.get("tool") not in TRACED:
            yield
            return
        import torch

        role = _role(self._kind, method)
        traced = role in self._plan["roles"][self._kind]
        options = self._options(role)
        previous, _CURRENT = _CURRENT, self
        try:
            if step.session is not None or not traced or not options.discrete or method not in STAGES:
                self._open_continuous(step, role, traced and not options.discrete)
                if options.discrete and traced and step.session is not None and method in STAGES:
                    _warn_once(
                        f"{method} asks for a trace of its own (discrete), but this process's continuous trace is "
                        "open (another worker of the process, or continuous steps): it is a row of that trace"
                    )
                with torch.profiler.record_function(method):
                    yield
            elif role == "rollout":
                with self._rollout_trace(options, method):
                    yield
            else:
                with self._discrete(method, options):
                    yield
        finally:
            _CURRENT = previous

    def _open_continuous(self, step: _Step, role: str, wanted: bool) -> None:
        """Open the step's continuous session for a traced, continuous stage (when it is not open yet)."""
        global _STEPPING
        if step.session is not None or not wanted:
            return
        options, train = self._options(role), self._options("train")
        # the update's mini-batches, later in this session, follow the training role's schedule
        schedule = None if train.discrete else train.schedule_kwargs()
        step.session = _Session(options.profile_kwargs(self._cuda()), schedule, step.folder, step.stem)
        step.owner = self
        if schedule is not None:
            _STEPPING = (step.session, self)

    @contextlib.contextmanager
    def _discrete(self, method: str, options: TorchOptions) -> Iterator[None]:
        """A session of its own for stage ``method``; the update follows the role's schedule."""
        global _STEPPING
        import torch

        assert self._step is not None
        schedule = options.schedule_kwargs() if method in UPDATES else None
        stem = f"{self.member}.{method}"
        session = _Session(options.profile_kwargs(self._cuda()), schedule, self._step.folder, lambda: stem)
        if schedule is not None:
            _STEPPING = (session, self)
        try:
            with torch.profiler.record_function(method):
                yield
        finally:
            if _STEPPING is not None and _STEPPING[0] is session:
                _STEPPING = None
            self._written += session.close()

    @contextlib.contextmanager
    def _rollout_trace(self, options: TorchOptions, method: str) -> Iterator[None]:
        """Ask the rollout engine to trace this generation into the replica's folder."""
        request = RolloutTraceRequest(
            rollout_trace_dir(self._plan["save_path"], self.rank), self._step_number, self.rank, options, self._cuda()
        )
        with requesting(request):
            yield
        if not request.claimed:
            _warn_once(
                f"{method}: the rollout engine of this worker does not trace itself, so the discrete rollout stage "
                "wrote no trace (rlcore's hf and vllm engines do)"
            )
        self._written += request.written

    def stop(self) -> list[str]:
        """End this worker's part of the trace; the files written (a shared session's by its last worker).
        Relocates the rollout traces when the plan says so."""
        global _STEP, _STEPPING
        import torch

        nvtx.end_step()
        written: list[str] = []
        if self._snapshot and self._folder is not None:  # CUDA memory history: dump the snapshot after the step
            self._snapshot = False
            path = str(self._folder / f"{self.name}_rank{self.rank}.memory_snapshot.pickle")
            torch.cuda.memory._dump_snapshot(path)
            written.append(path)
        step, self._step = self._step, None
        if step is not None:
            written += self._written
            self._written = []
            step.open -= 1
            if not step.open:
                _STEP = None
                if step.session is not None:
                    if _STEPPING is not None and _STEPPING[0] is step.session:
                        _STEPPING = None
                    written += step.session.close()
                    if self._plan["tool"] == "torch_memory":
                        table = step.folder / f"{step.stem()}.memory.txt"
                        averages = step.session.profiler.key_averages()
                        table.write_text(averages.table(sort_by="self_cpu_memory_usage", row_limit=50))
                        written.append(str(table))
            if self._plan.get("relocate") and self._kind == "actor":
                written += relocate_rollout_traces(self._plan["save_path"], self.rank, step.folder)
        return written

    def finish(self) -> bool | None:
        """After the run's last trace is written on every rank of every group: run the finish hook when this
        rank is one it selects; whether it succeeded (None when this rank runs none)."""
        if not self._hook:
            return None
        self._hook = False
        return run_finish_hook(
            self._plan["hook"]["cmd"],
            save_path=self._plan["save_path"],
            tool=self._plan["tool"],
            rank=self.rank,
            role=self.name,
        )
