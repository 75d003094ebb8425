"""``ray_kwargs`` (Ray's start-up options)."""

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
    adds another ray.init argument (ray.init's own signature checks it before Ray starts)."""

    TAKES_ADDED_KEYS = True
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
