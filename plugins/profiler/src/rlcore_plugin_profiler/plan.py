"""Profiling of chosen training steps (verl's ``global_profiler`` and the roles' ``profiler`` sections).

``global_profiler.tool``:

- ``torch``: a ``torch.profiler`` trace of each chosen step on every profiled worker rank, written as a Chrome
  trace ``{save_path}/step{N}/{group}_rank{r}.trace.json`` (open it in Perfetto or ``chrome://tracing``);
- ``torch_memory``: on CUDA, the allocator's memory history is recorded
  (``torch.cuda.memory._record_memory_history`` with ``global_tool_config.torch_memory.*``) and a snapshot
  is dumped after each chosen step, ``{group}_rank{r}.memory_snapshot.pickle`` (open it in
  https://pytorch.org/memory_viz); on CPU, which has no allocator history, the step runs under
  ``torch.profiler`` with ``profile_memory=True`` instead, written as ``{group}_rank{r}.memory.trace.json``
  and a table of the operators' CPU memory, ``{group}_rank{r}.memory.txt``.

``global_profiler.steps`` lists the steps (null: every step for ``torch_memory``, as verl dumps a snapshot
after each update, and ``nsys``; no step for ``torch`` and ``npu``, as in verl); ``profile_continuous_steps=true`` makes a run of consecutive
chosen steps one trace, named after its first step. A worker group is profiled when one of its roles'
``profiler.enable`` is true (``actor_rollout_ref.{actor,rollout,ref}.profiler``, ``critic.profiler``,
``reward_model.profiler``), or every group when no role enables it; within a group, ``profiler.all_ranks``
or ``profiler.ranks`` choose the ranks (default: rank 0), and the stages of the roles that enable it are
traced (all of them when none does). With ``tool=torch`` each role's ``profiler.tool_config.torch``
(:mod:`rlcore_plugin_profiler.torch_options`) says what is recorded and how the traces are cut;
``global_profiler.relocate_results`` moves the rollout engine's traces next to the training ones and
``global_profiler.finish_hook_cmd`` runs a command after the last profiled step (:mod:`rlcore_plugin_profiler.finish`). ``nsys``: :mod:`rlcore_plugin_profiler.nvtx` marks NVTX
ranges on CUDA ranks for Nsight Systems, which the user launches the run under; ``npu`` (verl's Ascend profiler)
is recorded as ``torch`` is, from the roles' ``profiler.tool_config.npu`` (:mod:`rlcore_plugin_profiler.npu`).

This module only reads the config (the controller side); the workers' side is
:mod:`rlcore_plugin_profiler.worker`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlcore.api import RLCoreError
from rlcore_plugin_profiler.npu import npu_note, read_npu_options
from rlcore_plugin_profiler.torch_options import TorchOptions, continuous_window, read_torch_options

__all__ = [
    "GROUP_SECTIONS",
    "ROLE_SECTIONS",
    "FinishHook",
    "ProfilePlan",
    "TRACED",
    "StepProfiling",
    "describe_profiler",
    "profile_plan",
    "profiler_lines",
    "step_profiling",
]

TOOLS = ("torch", "torch_memory", "nsys", "npu")
#: the tools whose steps are torch.profiler traces cut by the roles' settings (``tool_config.<tool>``)
TRACED = ("torch", "npu")
#: how each traced tool's role settings are read
_READERS: dict[str, Callable[[str, dict[str, Any], bool], TorchOptions]] = {
    "torch": read_torch_options,
    "npu": read_npu_options,
}
KEY = "global_profiler"
#: per worker group kind, the section of each of its stage roles: ``train`` (the group's own calls),
#: ``ref`` (``compute_ref_log_prob``) and ``rollout`` (``generate_sequences``)
ROLE_SECTIONS: dict[str, dict[str, str]] = {
    "actor": {
        "train": "actor_rollout_ref.actor",
        "rollout": "actor_rollout_ref.rollout",
        "ref": "actor_rollout_ref.ref",
    },
    "critic": {"train": "critic"},
    "reward_model": {"train": "reward_model"},  # verl has no reward-model tool_config: the defaults apply
}
#: the role sections whose ``profiler.{enable, all_ranks, ranks}`` choose what a worker group profiles
GROUP_SECTIONS: dict[str, tuple[str, ...]] = {kind: tuple(roles.values()) for kind, roles in ROLE_SECTIONS.items()}


@dataclass(frozen=True)
class FinishHook:
    """``global_profiler.finish_hook_cmd`` and the ranks that run it (``all_ranks``; else ``ranks``; else the
    profiled ranks when ``ranks`` is empty)."""

    cmd: str | None = None
    all_ranks: bool = False
    ranks: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A plain dict for the workers."""
        return {"cmd": self.cmd, "all_ranks": self.all_ranks, "ranks": list(self.ranks)}


@dataclass(frozen=True)
class ProfilePlan:
    """What to profile: the ``tool``, the ``steps`` (None: every step), where to write, the CUDA memory-history
    options and, per worker group kind (``actor``, ``critic``, ``reward_model``), the ranks to profile
    (None: all ranks); a kind missing from ``ranks`` is not profiled."""

    tool: str
    steps: tuple[int, ...] | None
    continuous: bool
    save_path: str
    memory_options: dict[str, Any] = field(default_factory=dict)
    ranks: dict[str, tuple[int, ...] | None] = field(default_factory=dict)
    options: dict[str, dict[str, TorchOptions]] = field(default_factory=dict)
    roles: dict[str, tuple[str, ...]] = field(default_factory=dict)
    relocate: bool = False
    hook: FinishHook = FinishHook()

    def profiled(self, step: int) -> bool:
        """Whether ``step`` is one of the chosen steps."""
        return self.steps is None or step in self.steps

    def starts(self, step: int) -> bool:
        """Whether a trace starts at ``step`` (with continuous steps, only at the first of a run of them)."""
        return self.profiled(step) and not (self.continuous and self.steps is not None and step - 1 in self.steps)

    def stops(self, step: int, last: int) -> bool:
        """Whether a trace ends after ``step`` (the last step of the run ends any trace)."""
        if not self.profiled(step):
            return False
        return step == last or not (self.continuous and self.steps is not None and step + 1 in self.steps)

    def final(self, step: int, last: int) -> bool:
        """Whether the trace that starts at ``step`` is the run's last one (``last``: the run's last step)."""
        end = step
        while self.continuous and self.steps is not None and end + 1 in self.steps and end < last:
            end += 1
        if self.steps is None:
            return end >= last
        return not any(end < later <= last for later in self.steps)

    def to_dict(self, final: bool = False) -> dict[str, Any]:
        """A plain dict for the workers (it crosses process boundaries under Ray); ``final``: the trace about
        to start is the last one (the finish hook runs when it stops)."""
        return {
            "tool": self.tool,
            "save_path": self.save_path,
            "memory_options": dict(self.memory_options),
            "ranks": {kind: (list(r) if r is not None else None) for kind, r in self.ranks.items()},
            "options": {
                kind: {role: opts.to_dict() for role, opts in roles.items()} for kind, roles in self.options.items()
            },
            "roles": {kind: list(roles) for kind, roles in self.roles.items()},
            "relocate": self.relocate,
            "hook": self.hook.to_dict(),
            "final": final,
        }


def _select(config: Any, key: str, default: Any = None) -> Any:
    from omegaconf import OmegaConf

    value = OmegaConf.select(config, key, default=default)
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _steps(config: Any, tool: str) -> tuple[int, ...] | None:
    steps = _select(config, f"{KEY}.steps")
    if steps is None:
        return () if tool in TRACED else None
    if isinstance(steps, int) and not isinstance(steps, bool):
        steps = [steps]
    if not isinstance(steps, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in steps):
        raise RLCoreError(f"{KEY}.steps must be a list of positive step numbers or null, got {steps!r}")
    return tuple(sorted(set(steps)))


def _enabled(config: Any) -> dict[str, list[str]]:
    return {
        kind: [s for s in sections if _select(config, f"{s}.profiler.enable", False) is True]
        for kind, sections in GROUP_SECTIONS.items()
    }


def _roles(config: Any, kinds: list[str]) -> dict[str, tuple[str, ...]]:
    """Per profiled kind, the roles whose stages are traced: those whose section enables profiling (all of
    them when none does)."""
    enabled = _enabled(config)
    return {
        kind: tuple(role for role, s in ROLE_SECTIONS[kind].items() if not enabled[kind] or s in enabled[kind])
        for kind in kinds
    }


def _torch_options(config: Any, tool: str, kinds: list[str]) -> dict[str, dict[str, TorchOptions]]:
    """Per profiled kind and role, the torch trace's options from the role's ``profiler.tool_config.<tool>``
    (``torch``, or ``npu`` mapped onto torch's); a traced tool's section set away from its defaults with another
    tool, or the reference's apart from the actor's, is an error."""
    for other, reader in _READERS.items():
        if other == tool:
            continue
        changed = [
            f"{section}.profiler.tool_config.{other}"
            for roles in ROLE_SECTIONS.values()
            for role, section in roles.items()
            if role != "ref"
            and reader(section, _given(config, section, other), role == "rollout")
            != reader(section, {}, role == "rollout")
        ]
        if changed:
            raise RLCoreError(
                f"{changed[0]} is set, but it applies to {KEY}.tool={other} and the tool is {tool}: "
                f"leave it at its defaults or profile with the {other} tool"
            )
    reader = _READERS.get(tool, read_torch_options)
    name = tool if tool in _READERS else "torch"
    options = {
        kind: {
            role: reader(section, _given(config, section, name), role == "rollout") for role, section in roles.items()
        }
        for kind, roles in ROLE_SECTIONS.items()
    }
    if options["actor"]["ref"] != options["actor"]["train"]:
        raise RLCoreError(
            f"actor_rollout_ref.ref.profiler.tool_config.{name} differs from actor_rollout_ref.actor's: the "
            f"reference runs in the actor's worker and shares its trace settings; set them on actor_rollout_ref.actor "
            "only"
        )
    return {kind: options[kind] for kind in kinds}


def _given(config: Any, section: str, tool: str) -> dict[str, Any]:
    """The resolved ``{section}.profiler.tool_config.{tool}`` (empty when absent)."""
    return _select(config, f"{section}.profiler.tool_config.{tool}") or {}


def _hook(config: Any) -> FinishHook:
    cmd = _select(config, f"{KEY}.finish_hook_cmd")
    if cmd is not None and (not isinstance(cmd, str) or not cmd.strip()):
        raise RLCoreError(f"{KEY}.finish_hook_cmd must be a shell command or null, got {cmd!r}")
    all_ranks = _select(config, f"{KEY}.finish_hook_all_ranks", False)
    ranks = _select(config, f"{KEY}.finish_hook_ranks") or []
    if not isinstance(all_ranks, bool):
        raise RLCoreError(f"{KEY}.finish_hook_all_ranks must be true or false, got {all_ranks!r}")
    if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ranks):
        raise RLCoreError(f"{KEY}.finish_hook_ranks must be a list of rank numbers, got {ranks!r}")
    if cmd is None and (all_ranks or ranks):
        raise RLCoreError(
            f"{KEY}.finish_hook_all_ranks/finish_hook_ranks choose where {KEY}.finish_hook_cmd runs, which is null"
        )
    return FinishHook(cmd, all_ranks, tuple(sorted(set(ranks))))


def _ranks(config: Any) -> dict[str, tuple[int, ...] | None]:
    enabled = _enabled(config)
    kinds = [kind for kind in GROUP_SECTIONS if enabled[kind]] or list(GROUP_SECTIONS)
    chosen: dict[str, tuple[int, ...] | None] = {}
    for kind in kinds:
        looked = enabled[kind] or list(GROUP_SECTIONS[kind])
        if any(_select(config, f"{s}.profiler.all_ranks", False) is True for s in looked):
            chosen[kind] = None
            continue
        listed: set[int] = set()
        for section in looked:
            values = _select(config, f"{section}.profiler.ranks") or []
            if not isinstance(values, list) or not all(isinstance(r, int) and r >= 0 for r in values):
                raise RLCoreError(f"{section}.profiler.ranks must be a list of rank numbers, got {values!r}")
            listed.update(values)
        chosen[kind] = tuple(sorted(listed)) or (0,)
    return chosen


def profile_plan(config: Any) -> ProfilePlan | None:
    """The run's :class:`ProfilePlan`, or None when ``global_profiler.tool`` is null; bad values raise an error
    naming the key."""
    tool = _select(config, f"{KEY}.tool")
    if tool is None:
        return None
    if tool not in TOOLS:
        raise RLCoreError(f"{KEY}.tool={tool!r}: rlcore profiles with {', '.join(TOOLS)} (or null: no profiling)")
    save_path = _select(config, f"{KEY}.save_path") or "outputs/profile"
    memory = _select(config, f"{KEY}.global_tool_config.torch_memory") or {}
    options = {
        "max_entries": int(memory.get("trace_alloc_max_entries", 100000)),
        "stack_depth": int(memory.get("stack_depth", 32)),
        "context": memory.get("context", "all"),
        "stacks": memory.get("stacks", "all"),
        **dict(memory.get("kw_args") or {}),
    }
    relocate = _select(config, f"{KEY}.relocate_results", False)
    if not isinstance(relocate, bool):
        raise RLCoreError(f"{KEY}.relocate_results must be true or false, got {relocate!r}")
    ranks = _ranks(config)
    return ProfilePlan(
        tool=str(tool),
        steps=_steps(config, str(tool)),
        continuous=bool(_select(config, f"{KEY}.profile_continuous_steps", False)),
        save_path=str(save_path),
        memory_options=options,
        ranks=ranks,
        options=_torch_options(config, str(tool), list(ranks)),
        roles=_roles(config, list(ranks)),
        relocate=relocate,
        hook=_hook(config),
    )


def _traces_itself(config: Any, tool: str) -> str:
    """The rollout engine's name; an error when it cannot trace its own generation (``traces_itself``)."""
    from rlcore import load_plugins

    name = str(_select(config, "actor_rollout_ref.rollout.name", "hf"))
    if not getattr(load_plugins().registry.load("rollout_engine", name), "traces_itself", False):
        raise RLCoreError(
            f"actor_rollout_ref.rollout.profiler.tool_config.{tool}.discrete=true: the {name} rollout engine does not "
            "trace its own generation (the hf and vllm engines do); set it to false to trace the rollout inside "
            "the step's trace"
        )
    return name


def _describe_torch(config: Any, plan: ProfilePlan, cpu: bool) -> list[str]:
    """What each traced role of a ``tool=torch`` (or ``npu``) plan records, and the finish hook."""
    parts = []
    device = "npu" if plan.tool == "npu" else "cuda"  # the contents' name of the device's activity
    for kind, roles in plan.roles.items():
        for role in roles:
            opts = plan.options[kind][role]
            name = ROLE_SECTIONS[kind][role].rsplit(".", 1)[-1]
            what = ",".join(device if c == "cuda" else c for c in opts.contents) or "all"
            if role == "rollout" and opts.discrete:
                engine = _traces_itself(config, plan.tool)
                window = ""
                if opts.token_window:
                    window = f" over response tokens {opts.token_start or 0}..{opts.token_end or 'end'}"
                where = (
                    "relocated into step<N>/" if plan.relocate else "under save_path/agent_loop_rollout_replica_<r>/"
                )
                parts.append(f"{name}: traced by the {engine} engine itself{window}, contents {what}, {where}")
                continue
            mode = "one trace per stage" if opts.discrete else "stages are rows of the step's trace"
            schedule = opts.schedule_kwargs()
            if schedule is not None and not opts.discrete:
                mode += ", " + continuous_window(schedule)
            elif schedule is not None:
                mode += (
                    ", the update's mini-batches under torch.profiler.schedule("
                    + ", ".join(f"{k}={v}" for k, v in schedule.items())
                    + ")"
                )
            parts.append(f"{name}: {mode}, contents {what}")
    if cpu and any("cuda" in o.contents for roles in plan.options.values() for o in roles.values()):
        parts.append(f"contents {device} records nothing on the CPU")
    if plan.hook.cmd:
        ranks = "every rank" if plan.hook.all_ranks else "ranks " + ",".join(map(str, plan.hook.ranks))
        parts.append(
            f"finish_hook_cmd once after the last profiled step on {ranks if plan.hook.ranks or plan.hook.all_ranks else 'the profiled ranks'}"
        )
    return parts


def describe_profiler(config: Any) -> str | None:
    """The run plan's line for the profiler (None when off): the tool, what it writes on this device, the
    steps, the groups and ranks, and the folder."""
    plan = profile_plan(config)
    if plan is None:
        return None
    cpu = _select(config, "trainer.device", "auto") == "cpu"
    if plan.tool in TRACED:
        what = "torch.profiler Chrome traces (" + "; ".join(_describe_torch(config, plan, cpu)) + ")"
    elif plan.tool == "nsys" and cpu:
        what = "nsys on CPU: nothing is recorded (NVTX ranges and cudaProfilerStart/Stop need CUDA)"
    elif plan.tool == "nsys":
        what = (
            "nsys: an NVTX range per worker call inside step<N> ranges, between cudaProfilerStart/Stop (launch "
            "the run under nsys profile --capture-range=cudaProfilerApi --trace=cuda,nvtx; nothing is written "
            "under save_path)"
        )
    elif cpu:
        what = (
            "torch_memory on CPU: torch.profiler with profile_memory=True (a Chrome trace with memory events and "
            "a table of CPU memory per operator; trace_alloc_max_entries and stack_depth apply to CUDA snapshots)"
        )
    else:
        what = "torch_memory: CUDA memory snapshots (torch.cuda.memory._record_memory_history/_dump_snapshot)"
    if plan.steps is None:
        steps = "every step"
    elif not plan.steps:
        steps = f"no step ({KEY}.steps is null: list the steps to profile)"
    else:
        steps = "steps " + ", ".join(map(str, plan.steps))
    groups = ", ".join(
        f"{kind} {'all ranks' if ranks is None else 'ranks ' + ','.join(map(str, ranks))}"
        for kind, ranks in plan.ranks.items()
    )
    return f"profiler: {what}; {steps}; {groups}; under {plan.save_path}/step<N>/"


def profiler_lines(config: Any) -> list[str]:
    """The run plan's lines for the profiler (none when off): :func:`describe_profiler`'s, after the line naming
    the substitution when ``tool=npu`` is recorded by torch.profiler."""
    line = describe_profiler(config)
    if line is None:
        return []
    if _select(config, f"{KEY}.tool") == "npu":
        return [npu_note(_select(config, "trainer.device", "auto") == "cpu"), line]
    return [line]


class StepProfiling:
    """The controller's side: tells the profiled worker groups when a chosen step starts and ends.

    Args:
        plan: the run's plan.
        groups: ``(kind, group)`` pairs, kind one of :data:`GROUP_SECTIONS`; each group is called with
            ``start_profile(step, kind, plan)``, ``stop_profile()`` and, after the run's last trace,
            ``finish_profile()`` on all of its ranks.
    """

    def __init__(self, plan: ProfilePlan, groups: list[tuple[str, Any]]) -> None:
        self.plan = plan
        self.groups = [(kind, group) for kind, group in groups if kind in plan.ranks]
        self.active = False
        self.final = False

    def before_step(self, step: int, last: int) -> None:
        """Start the trace of ``step`` when it is chosen (and not continuing a trace); ``last`` is the run's
        last step (the workers run the finish hook when the run's last trace stops)."""
        if self.plan.starts(step) and not self.active:
            self.final = self.plan.final(step, last)
            payload = self.plan.to_dict(final=self.final)
            for kind, group in self.groups:
                group.start_profile(step, kind, payload)
            self.active = True

    def after_step(self, step: int, last: int) -> None:
        """End the trace after ``step`` when it is the last of its run (or the run's last step)."""
        if self.active and self.plan.stops(step, last):
            self.close()

    def close(self) -> None:
        """End a trace that is still running (the run stopped early); after the run's last trace, once every
        group has written its files, the finish hook runs (``finish_profile``)."""
        if self.active:
            for _, group in self.groups:
                group.stop_profile()
            self.active = False
            if self.final and self.plan.hook.cmd:
                self.final = False
                for _, group in self.groups:
                    group.finish_profile()


def step_profiling(plan: ProfilePlan, groups: Any) -> StepProfiling:
    """The controller's :class:`StepProfiling` of ``plan`` over the run's worker groups (``groups.actor``,
    ``groups.rollout`` when ``groups.split``, ``groups.critic``, ``groups.reward_model``)."""
    kinds = [("actor", groups.actor)]
    if groups.split:
        kinds.append(("actor", groups.rollout))
    kinds += [
        (kind, group) for kind, group in (("critic", groups.critic), ("reward_model", groups.reward_model)) if group
    ]
    return StepProfiling(plan, kinds)
