"""The plugin's config keys as typed sections with their defaults (torch-free: the hooks module returns them
from ``config_defaults``): ``global_profiler`` (profiling of chosen steps) and the ``profiler`` subsection of
each role (which ranks ``global_profiler`` profiles and how a torch trace is cut); the reference's and the
rollout's follow the actor's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlcore.api import Section, config_ref


@dataclass(frozen=True)
class TorchScheduleConfig(Section):
    """``actor_rollout_ref.actor.profiler.tool_config.torch.schedule``: torch.profiler.schedule over the update loop's
    mini-batches (active 0: all)."""

    #: discrete only: mini-batches dropped first
    skip_first: int = 0
    #: discrete only: mini-batches idle at the start of each cycle
    wait: int = 0
    #: discrete only: mini-batches traced but discarded before each window
    warmup: int = 0
    #: mini-batches kept per window (continuous: the first `active`, every stage before them kept)
    active: int = 0
    #: discrete only: windows (0: until the stage ends)
    repeat: int = 0


@dataclass(frozen=True)
class TorchTraceConfig(Section):
    """``actor_rollout_ref.actor.profiler.tool_config.torch``: global_profiler.tool=torch: what the traces record and
    how they are cut."""

    #: cpu | cuda | memory | shapes | stack (empty: every activity, no extras; cpu is always on)
    contents: list[str] = field(default_factory=list)
    #: false: one trace per step (stages are rows); true: one trace per stage
    discrete: bool = False
    #: torch.profiler.schedule over the update loop's mini-batches (active 0: all)
    schedule: TorchScheduleConfig = field(default_factory=TorchScheduleConfig)


@dataclass(frozen=True)
class NpuTraceConfig(Section):
    """``actor_rollout_ref.actor.profiler.tool_config.npu``: global_profiler.tool=npu (verl's Ascend profiler, an API
    twin of torch.profiler): recorded by torch.profiler where there is no Ascend device."""

    #: npu (the device's activity: CUDA on CUDA) | cpu | memory | shapes | module | stack (empty: CPU activity only;
    #: cpu is always on)
    contents: list[str] = field(default_factory=list)
    #: false: one trace per step (stages are rows); true: one trace per stage
    discrete: bool = False
    #: torch_npu's collection level: level0 (operators and kernels, what torch.profiler records) only
    level: str = "level0"
    #: true: the trace is parsed as it is written (what torch.profiler does); false is refused
    analysis: bool = True


@dataclass(frozen=True)
class ProfilerToolConfig(Section):
    """``actor_rollout_ref.actor.profiler.tool_config``: the settings of each profiling tool for this role."""

    #: global_profiler.tool=torch: what the traces record and how they are cut
    torch: TorchTraceConfig = field(default_factory=TorchTraceConfig)
    #: global_profiler.tool=npu: verl's Ascend profiler, recorded by torch.profiler here
    npu: NpuTraceConfig = field(default_factory=NpuTraceConfig)


@dataclass(frozen=True)
class RefTorchScheduleConfig(TorchScheduleConfig):
    """``actor_rollout_ref.ref.profiler.tool_config.torch.schedule``: the actor's schedule."""

    #: the actor's
    skip_first: int = config_ref("actor_rollout_ref.actor.profiler.tool_config.torch.schedule.skip_first")
    #: the actor's
    wait: int = config_ref("actor_rollout_ref.actor.profiler.tool_config.torch.schedule.wait")
    #: the actor's
    warmup: int = config_ref("actor_rollout_ref.actor.profiler.tool_config.torch.schedule.warmup")
    #: the actor's
    active: int = config_ref("actor_rollout_ref.actor.profiler.tool_config.torch.schedule.active")
    #: the actor's
    repeat: int = config_ref("actor_rollout_ref.actor.profiler.tool_config.torch.schedule.repeat")


@dataclass(frozen=True)
class RefTorchTraceConfig(TorchTraceConfig):
    """``actor_rollout_ref.ref.profiler.tool_config.torch``: the reference runs in the actor's worker and shares its
    trace settings."""

    #: the actor's
    contents: list[str] = config_ref("actor_rollout_ref.actor.profiler.tool_config.torch.contents")
    #: the actor's
    discrete: bool = config_ref("actor_rollout_ref.actor.profiler.tool_config.torch.discrete")
    #: the actor's schedule
    schedule: RefTorchScheduleConfig = field(default_factory=RefTorchScheduleConfig)


@dataclass(frozen=True)
class RefNpuTraceConfig(NpuTraceConfig):
    """``actor_rollout_ref.ref.profiler.tool_config.npu``: the reference runs in the actor's worker and shares its
    trace settings."""

    #: the actor's
    contents: list[str] = config_ref("actor_rollout_ref.actor.profiler.tool_config.npu.contents")
    #: the actor's
    discrete: bool = config_ref("actor_rollout_ref.actor.profiler.tool_config.npu.discrete")
    #: the actor's
    level: str = config_ref("actor_rollout_ref.actor.profiler.tool_config.npu.level")
    #: the actor's
    analysis: bool = config_ref("actor_rollout_ref.actor.profiler.tool_config.npu.analysis")


@dataclass(frozen=True)
class RefProfilerToolConfig(ProfilerToolConfig):
    """``actor_rollout_ref.ref.profiler.tool_config``: the reference runs in the actor's worker and shares its trace
    settings."""

    #: the reference runs in the actor's worker and shares its trace settings
    torch: RefTorchTraceConfig = field(default_factory=RefTorchTraceConfig)
    #: the reference runs in the actor's worker and shares its trace settings
    npu: RefNpuTraceConfig = field(default_factory=RefNpuTraceConfig)


@dataclass(frozen=True)
class RolloutTorchTraceConfig(Section):
    """``actor_rollout_ref.rollout.profiler.tool_config.torch``: the generation stage's trace
    (global_profiler.tool=torch)."""

    #: as the actor's
    contents: list[str] = config_ref("actor_rollout_ref.actor.profiler.tool_config.torch.contents")
    #: true: the engine traces itself into save_path/agent_loop_rollout_replica_<rank>/ (hf, vllm)
    discrete: bool = config_ref("actor_rollout_ref.actor.profiler.tool_config.torch.discrete")
    #: trace from this response token on (null: the first)
    profile_token_start: int | None = None
    #: ... up to this one, excluded (null: the last)
    profile_token_end: int | None = None


@dataclass(frozen=True)
class RolloutNpuTraceConfig(Section):
    """``actor_rollout_ref.rollout.profiler.tool_config.npu``: the generation stage's trace
    (global_profiler.tool=npu, recorded by torch.profiler here)."""

    #: as the actor's
    contents: list[str] = config_ref("actor_rollout_ref.actor.profiler.tool_config.npu.contents")
    #: true: the engine traces itself into save_path/agent_loop_rollout_replica_<rank>/ (hf, vllm)
    discrete: bool = config_ref("actor_rollout_ref.actor.profiler.tool_config.npu.discrete")
    #: as the actor's
    level: str = config_ref("actor_rollout_ref.actor.profiler.tool_config.npu.level")
    #: as the actor's
    analysis: bool = config_ref("actor_rollout_ref.actor.profiler.tool_config.npu.analysis")
    #: trace from this response token on (null: the first)
    profile_token_start: int | None = None
    #: ... up to this one, excluded (null: the last)
    profile_token_end: int | None = None


@dataclass(frozen=True)
class RolloutProfilerToolConfig(Section):
    """``actor_rollout_ref.rollout.profiler.tool_config``: the settings of the generation stage's trace."""

    #: the generation stage's trace (global_profiler.tool=torch)
    torch: RolloutTorchTraceConfig = field(default_factory=RolloutTorchTraceConfig)
    #: the generation stage's trace (global_profiler.tool=npu)
    npu: RolloutNpuTraceConfig = field(default_factory=RolloutNpuTraceConfig)


@dataclass(frozen=True)
class ProfilerRanksConfig(Section):
    """``reward_model.profiler``: which ranks global_profiler profiles (docs/profiling.md)."""

    #: true: profile this role's worker group (none true: every group)
    enable: bool = False
    #: true: every rank of the group
    all_ranks: bool = False
    #: the ranks to profile (empty: rank 0)
    ranks: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class ProfilerConfig(ProfilerRanksConfig):
    """``actor_rollout_ref.actor.profiler``: which ranks global_profiler profiles (docs/profiling.md)."""

    #: the settings of each profiling tool for this role
    tool_config: ProfilerToolConfig = field(default_factory=ProfilerToolConfig)


@dataclass(frozen=True)
class RefProfilerConfig(ProfilerConfig):
    """``actor_rollout_ref.ref.profiler``: which ranks global_profiler profiles (docs/profiling.md)."""

    #: the reference runs in the actor's worker and shares its trace settings
    tool_config: RefProfilerToolConfig = field(default_factory=RefProfilerToolConfig)


@dataclass(frozen=True)
class RolloutProfilerConfig(ProfilerRanksConfig):
    """``actor_rollout_ref.rollout.profiler``: which ranks global_profiler profiles (docs/profiling.md)."""

    #: the settings of the generation stage's trace
    tool_config: RolloutProfilerToolConfig = field(default_factory=RolloutProfilerToolConfig)


@dataclass(frozen=True)
class TorchMemoryConfig(Section):
    """``global_profiler.global_tool_config.torch_memory``: torch.cuda.memory._record_memory_history arguments (CUDA
    only)."""

    #: allocations recorded at most
    trace_alloc_max_entries: int = 100000
    #: frames kept per allocation
    stack_depth: int = 32
    #: which events record a stack: all | alloc | state | null
    context: str | None = "all"
    #: which stacks are recorded: all | python
    stacks: str = "all"
    #: further arguments passed through to torch.cuda.memory._record_memory_history
    kw_args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GlobalToolConfig(Section):
    """``global_profiler.global_tool_config``: the settings of each profiling tool."""

    #: torch.cuda.memory._record_memory_history arguments (CUDA only)
    torch_memory: TorchMemoryConfig = field(default_factory=TorchMemoryConfig)


@dataclass(frozen=True)
class GlobalProfilerConfig(Section):
    """``global_profiler``: profiling of chosen steps (docs/profiling.md)."""

    PATH = "global_profiler"

    #: null | torch (Chrome traces) | torch_memory (CUDA memory snapshots; on CPU a memory profile) | nsys (NVTX
    #: ranges) | npu (verl's Ascend profiler, recorded as torch's here)
    tool: str | None = None
    #: the steps to profile; null: every step for torch_memory and nsys, none for torch and npu
    steps: list[int] | None = None
    #: true: consecutive chosen steps make one trace
    profile_continuous_steps: bool = False
    #: files go to save_path/step<N>/<group>_rank<r>.*
    save_path: str = "outputs/profile"
    #: true: after each profiled step the rollout engine's traces move from save_path/agent_loop_rollout_replica_<r>/
    #: into save_path/step<N>/, renamed rollout-replica<r>_*
    relocate_results: bool = False
    #: a shell command run once after the last profiled step on each selected rank, with
    #: VERL_PROFILE_{SAVE_PATH,TOOL,RANK,PID,ROLE} set; a failure is logged
    finish_hook_cmd: str | None = None
    #: true: every rank of the profiled groups runs finish_hook_cmd
    finish_hook_all_ranks: bool = False
    #: these ranks run it (empty: the profiled ranks)
    finish_hook_ranks: list[int] = field(default_factory=list)
    #: the settings of each profiling tool
    global_tool_config: GlobalToolConfig = field(default_factory=GlobalToolConfig)


def role_sections() -> dict[str, Any]:
    """The ``profiler`` subsection of each role, nested at its path (what ``config_defaults`` mounts)."""
    return {
        "actor_rollout_ref": {
            "actor": {"profiler": ProfilerConfig()},
            "ref": {"profiler": RefProfilerConfig()},
            "rollout": {"profiler": RolloutProfilerConfig()},
        },
        "critic": {"profiler": ProfilerConfig()},
        "reward_model": {"profiler": ProfilerRanksConfig()},
    }
