"""The ``profiler`` subsection of each role (which ranks ``global_profiler`` profiles and how a torch trace
is cut); the reference's and the rollout's follow the actor's."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcore.config.sections.base import Section, ref


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
class ProfilerToolConfig(Section):
    """``actor_rollout_ref.actor.profiler.tool_config``: the settings of each profiling tool for this role."""

    #: global_profiler.tool=torch: what the traces record and how they are cut
    torch: TorchTraceConfig = field(default_factory=TorchTraceConfig)


@dataclass(frozen=True)
class RefTorchScheduleConfig(TorchScheduleConfig):
    """``actor_rollout_ref.ref.profiler.tool_config.torch.schedule``: the actor's schedule."""

    #: the actor's
    skip_first: int = ref("actor_rollout_ref.actor.profiler.tool_config.torch.schedule.skip_first")
    #: the actor's
    wait: int = ref("actor_rollout_ref.actor.profiler.tool_config.torch.schedule.wait")
    #: the actor's
    warmup: int = ref("actor_rollout_ref.actor.profiler.tool_config.torch.schedule.warmup")
    #: the actor's
    active: int = ref("actor_rollout_ref.actor.profiler.tool_config.torch.schedule.active")
    #: the actor's
    repeat: int = ref("actor_rollout_ref.actor.profiler.tool_config.torch.schedule.repeat")


@dataclass(frozen=True)
class RefTorchTraceConfig(TorchTraceConfig):
    """``actor_rollout_ref.ref.profiler.tool_config.torch``: the reference runs in the actor's worker and shares its
    trace settings."""

    #: the actor's
    contents: list[str] = ref("actor_rollout_ref.actor.profiler.tool_config.torch.contents")
    #: the actor's
    discrete: bool = ref("actor_rollout_ref.actor.profiler.tool_config.torch.discrete")
    #: the actor's schedule
    schedule: RefTorchScheduleConfig = field(default_factory=RefTorchScheduleConfig)


@dataclass(frozen=True)
class RefProfilerToolConfig(ProfilerToolConfig):
    """``actor_rollout_ref.ref.profiler.tool_config``: the reference runs in the actor's worker and shares its trace
    settings."""

    #: the reference runs in the actor's worker and shares its trace settings
    torch: RefTorchTraceConfig = field(default_factory=RefTorchTraceConfig)


@dataclass(frozen=True)
class RolloutTorchTraceConfig(Section):
    """``actor_rollout_ref.rollout.profiler.tool_config.torch``: the generation stage's trace
    (global_profiler.tool=torch)."""

    #: as the actor's
    contents: list[str] = ref("actor_rollout_ref.actor.profiler.tool_config.torch.contents")
    #: true: the engine traces itself into save_path/agent_loop_rollout_replica_<rank>/ (hf, vllm)
    discrete: bool = ref("actor_rollout_ref.actor.profiler.tool_config.torch.discrete")
    #: trace from this response token on (null: the first)
    profile_token_start: int | None = None
    #: ... up to this one, excluded (null: the last)
    profile_token_end: int | None = None


@dataclass(frozen=True)
class RolloutProfilerToolConfig(Section):
    """``actor_rollout_ref.rollout.profiler.tool_config``: the settings of the generation stage's trace."""

    #: the generation stage's trace (global_profiler.tool=torch)
    torch: RolloutTorchTraceConfig = field(default_factory=RolloutTorchTraceConfig)


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
