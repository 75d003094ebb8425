"""verl's ``ray_kwargs``: the ``ray.init`` options of the ``ray`` executor, their checks and the run plan's note.

``ray_kwargs.ray_init.*`` is passed to ``ray.init`` (over rlcore's own choices for a Ray it starts), its
``runtime_env.env_vars`` also reach every worker actor (:func:`ray_env_vars`, merged by
:func:`rlcore.controller.ray_executor.worker_env`), and ``ray_kwargs.timeline_json_file`` receives Ray's
timeline when the run's worker groups are gone (:mod:`rlcore.controller.placement`). Nothing here imports Ray.

``ray_kwargs.ray_init`` is read as a mapping of the tree, not as its typed section: ``+ray_kwargs.ray_init.KEY``
adds any other ``ray.init`` argument (``resources``, ``labels``, ...), which the section does not declare.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlcore.config.sections.runtime import RayKwargsConfig
from rlcore.config.sections.trainer import TrainerConfig

RAY_INIT = "ray_kwargs.ray_init"
TIMELINE_KEY = "ray_kwargs.timeline_json_file"
ENV_VARS_KEY = f"{RAY_INIT}.runtime_env.env_vars"
#: ``ray.init`` arguments that size or start a new Ray: Ray refuses them when attaching to a running cluster
NEW_RAY_ONLY: tuple[str, ...] = (
    "num_cpus",
    "num_gpus",
    "resources",
    "labels",
    "object_store_memory",
    "_system_config",
    "include_dashboard",
)
#: ``ray.init`` arguments that must be positive integers (or null)
POSITIVE_INTS: tuple[str, ...] = ("num_cpus", "num_gpus", "object_store_memory")
#: the smallest ``object_store_memory`` Ray starts with (its ``ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES``,
#: 75 MiB; ``ray.init`` raises a ValueError below it)
OBJECT_STORE_MINIMUM_BYTES = 75 * 2**20
#: ``env_vars`` values Ray accepts once written as text
SCALARS = (str, int, float, bool)


def _section(config: DictConfig) -> dict[str, Any]:
    """``ray_kwargs.ray_init`` as a plain dict (empty when absent), with the ``+key`` additions."""
    node = OmegaConf.select(config, RAY_INIT, default=None)
    if node is None:
        return {}
    plain = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    return {str(key): value for key, value in plain.items()} if isinstance(plain, Mapping) else {}


def ray_env_vars(config: DictConfig) -> dict[str, str]:
    """``ray_kwargs.ray_init.runtime_env.env_vars`` with every value as text (``true`` -> ``"True"``)."""
    runtime_env = _section(config).get("runtime_env") or {}
    env_vars = runtime_env.get("env_vars") if isinstance(runtime_env, Mapping) else None
    return {str(name): str(value) for name, value in (env_vars or {}).items()}


def ray_init_options(config: DictConfig, *, attach: bool) -> dict[str, Any]:
    """The keyword arguments for ``ray.init`` from ``ray_kwargs.ray_init``: null values and empty runtime-env
    fields left out, ``env_vars`` as text. ``attach`` (``trainer.ray_address`` set) leaves out
    :data:`NEW_RAY_ONLY`, which :func:`ray_kwargs_problems` makes sure are unset (or false) then."""
    section = _section(config)
    runtime_env = dict(section.pop("runtime_env", None) or {})
    runtime_env["env_vars"] = ray_env_vars(config)
    options = {
        key: value for key, value in section.items() if value is not None and not (attach and key in NEW_RAY_ONLY)
    }
    runtime_env = {key: value for key, value in runtime_env.items() if value not in (None, {}, [])}
    if runtime_env:
        options["runtime_env"] = runtime_env
    return options


def timeline_file(config: DictConfig) -> str | None:
    """Where Ray's timeline goes after the run (``ray_kwargs.timeline_json_file``), or None."""
    value = RayKwargsConfig.from_tree(config).timeline_json_file
    return str(value) if value else None


def _type_problems(section: Mapping[str, Any], timeline: Any) -> list[str]:
    """Values of the wrong type (or, ``object_store_memory``, below Ray's minimum), each naming its key."""
    problems = []
    for key in POSITIVE_INTS:
        value = section.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            problems.append(f"{RAY_INIT}.{key} must be a positive integer or null, got {value!r}")
    store = section.get("object_store_memory")
    if isinstance(store, int) and not isinstance(store, bool) and 0 < store < OBJECT_STORE_MINIMUM_BYTES:
        problems.append(
            f"{RAY_INIT}.object_store_memory={store} is below Ray's minimum object store of "
            f"{OBJECT_STORE_MINIMUM_BYTES} bytes (75 MiB): ray.init would refuse it; give at least that, in bytes, "
            "or leave it null (rlcore gives a Ray it starts 512 MiB)"
        )
    runtime_env = section.get("runtime_env")
    if runtime_env is not None and not isinstance(runtime_env, Mapping):
        problems.append(f"{RAY_INIT}.runtime_env must be a mapping, got {runtime_env!r}")
        return problems
    runtime_env = runtime_env or {}
    env_vars = runtime_env.get("env_vars")
    if env_vars is not None and not isinstance(env_vars, Mapping):
        problems.append(f"{RAY_INIT}.runtime_env.env_vars must be a mapping of NAME: value, got {env_vars!r}")
    for name, value in (env_vars or {}).items() if isinstance(env_vars, Mapping) else ():
        if not isinstance(value, SCALARS):
            problems.append(f"{RAY_INIT}.runtime_env.env_vars.{name} must be a string or a number, got {value!r}")
    executable = runtime_env.get("py_executable")
    if executable is not None and not isinstance(executable, str):
        problems.append(f"{RAY_INIT}.runtime_env.py_executable must be a command (a string), got {executable!r}")
    if timeline is not None and not isinstance(timeline, str):
        problems.append(f"{TIMELINE_KEY} must be a file path, got {timeline!r}")
    return problems


def ray_kwargs_problems(config: DictConfig, trainer: TrainerConfig | None) -> list[str]:
    """Problems of ``ray_kwargs`` that stop the dry run: a value of the wrong type, an ``object_store_memory``
    below Ray's minimum; with ``trainer.ray_address`` (attaching to a running cluster) a :data:`NEW_RAY_ONLY`
    setting, named with both keys; without it a ``num_cpus`` smaller than the bundles the ranks need (the
    placement would wait for CPUs that never come). The checks that need the ``trainer`` section run when it
    builds (None: it has problems of its own)."""
    section = _section(config)
    problems = _type_problems(section, OmegaConf.select(config, TIMELINE_KEY))
    if problems or trainer is None or trainer.executor != "ray":
        return problems
    address = trainer.ray_address
    if address:
        for key in NEW_RAY_ONLY:
            if section.get(key) not in (None, False, {}):
                problems.append(
                    f"{RAY_INIT}.{key}={section[key]!r} cannot be used with trainer.ray_address={address!r}: "
                    f"the running cluster was sized when it was started (`ray start`); Ray refuses {key} "
                    f"when attaching. Drop one of the two keys"
                )
        return problems
    cpus = section.get("num_cpus")
    if cpus is not None:
        from rlcore.config.loader import ConfigError
        from rlcore.config.pools import bundles_per_node

        try:
            needed = bundles_per_node(config)
        except ConfigError:
            return problems  # the bad count is reported by its own check
        if cpus < needed:
            problems.append(
                f"{RAY_INIT}.num_cpus={cpus} is fewer than the {needed} CPU bundle(s) the ranks need on this node "
                f"(trainer.n_gpus_per_node, plus the rollout and reward pools); raise it or leave it null"
            )
    return problems


def given_ray_kwargs(config: DictConfig) -> list[str]:
    """The ``ray_kwargs`` keys whose values differ from rlcore's defaults."""
    from rlcore.config.loader import core_defaults, flatten

    defaults = flatten({"ray_kwargs": core_defaults()["ray_kwargs"]})
    node = OmegaConf.select(config, "ray_kwargs", default=None)
    if node is None:
        return []
    given = flatten({"ray_kwargs": OmegaConf.to_container(node, resolve=True)})
    return sorted(key for key, value in given.items() if value not in (defaults.get(key), {}))


def ray_kwargs_notes(config: DictConfig, trainer: TrainerConfig) -> list[str]:
    """The run plan's note when ``ray_kwargs`` is set but the run uses the local executor (no Ray)."""
    if trainer.executor != "local":
        return []
    given = given_ray_kwargs(config)
    if not given:
        return []
    return [
        f"{', '.join(given)}: unused, trainer.executor=local runs the workers in this process without Ray "
        "(set trainer.executor=ray to start Ray with them)"
    ]
