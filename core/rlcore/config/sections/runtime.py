"""``ray_kwargs`` (Ray's start-up options) and ``global_profiler`` (profiling of chosen steps)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlcore.config.sections.base import Section


@dataclass(frozen=True)
class RuntimeEnvConfig(Section):
    """``ray_kwargs.ray_init.runtime_env``: Ray's runtime environment of the job."""

    #: NAME: value for every worker process (over the RLCORE_* and PYTHONPATH the workers inherit)
    env_vars: dict[str, Any] = field(default_factory=dict)
    #: the Python command the workers run under (Ray's runtime_env.py_executable)
    py_executable: str | None = None


@dataclass(frozen=True)
class RayInitConfig(Section):
    """``ray_kwargs.ray_init``: passed to ray.init when rlcore starts Ray or attaches to it (trainer.ray_address); +key
    adds another ray.init argument."""

    #: CPUs of the Ray that rlcore starts; null: one per bundle the ranks need; not with trainer.ray_address
    num_cpus: int | None = None
    #: bytes of the object store of the Ray that rlcore starts; null: 512 MiB; not with trainer.ray_address
    object_store_memory: int | None = None
    #: true: Ray's dashboard (the Ray that rlcore starts)
    include_dashboard: bool = False
    #: false: the workers' output is not copied to the driver's terminal
    log_to_driver: bool = True
    #: Ray's runtime environment of the job
    runtime_env: RuntimeEnvConfig = field(default_factory=RuntimeEnvConfig)


@dataclass(frozen=True)
class RayKwargsConfig(Section):
    """``ray_kwargs``: verl's Ray start-up options (trainer.executor=ray; the local executor does not use them)."""

    PATH = "ray_kwargs"
    #: passed to ray.init when rlcore starts Ray or attaches to it (trainer.ray_address); +key adds another ray.init
    #: argument
    ray_init: RayInitConfig = field(default_factory=RayInitConfig)
    #: after the run, Ray's timeline of tasks and actors goes to this file (ray.timeline; chrome://tracing)
    timeline_json_file: str | None = None


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
    #: further arguments of _record_memory_history
    kw_args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GlobalToolConfig(Section):
    """``global_profiler.global_tool_config``: the settings of each profiling tool."""

    #: torch.cuda.memory._record_memory_history arguments (CUDA only)
    torch_memory: TorchMemoryConfig = field(default_factory=TorchMemoryConfig)


@dataclass(frozen=True)
class GlobalProfilerConfig(Section):
    """``global_profiler``: profiling of chosen steps (docs/profiling.md)."""

    #: null | torch (Chrome traces) | torch_memory (CUDA memory snapshots; on CPU a memory profile)
    tool: str | None = None
    #: the steps to profile; null: every step for torch_memory (torch needs a list)
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
