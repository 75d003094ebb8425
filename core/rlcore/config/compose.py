"""verl's (Hydra's) ways of naming config files: ``--config-path DIR --config-name NAME`` and ``defaults:`` lists.

rlcore does not use Hydra; this module reads the subset verl's scripts and example configs use:

- ``--config-path DIR`` / ``--config-name NAME`` (also ``=VALUE``, ``-cp`` and ``-cn``): the YAML file
  ``DIR/NAME.yaml``. verl's own config names, ``ppo_trainer`` and ``ppo_megatron_trainer``, are built in
  when no such file exists: the first is rlcore's defaults, the second selects the Megatron engine. So are its
  one-step-off and fully-async trainers' (``one_step_off_ppo_trainer``, ``fully_async_ppo_trainer`` and their
  ``_megatron_`` variants, :data:`BUILTIN_CONFIGS`): their settings that rlcore has.
- a ``defaults:`` list in any YAML file: other configs (``- ppo_trainer``), config groups
  (``- group@package: option`` → ``group/option.yaml`` placed under ``package``) and ``_self_`` (the
  file's own keys; last when it is not listed), in order, later entries winning.
- ``hydra.searchpath`` (in a file or on the command line): extra folders searched for the entries of a ``defaults:``
  list (and on the command line for ``--config-name``); of Python packages (``pkg://``) only
  :data:`SEARCHED_PACKAGES`, whose configs rlcore has built in.
- verl 0.10's engine group on the command line: ``model_engine=dp|megatron`` (also spelled
  ``actor_rollout_ref.actor.model_engine``) and the groups it picks, ``actor@actor_rollout_ref.actor=dp_actor``,
  ``ref@actor_rollout_ref.ref=dp_ref`` and ``critic@critic=dp_critic``: each selects the engine's defaults
  (the strategy of the roles it covers), as ``--config-name ppo_megatron_trainer`` does, before any file or
  override. ``model_engine=veomni``, ``=torchtitan``, ``=mindspeed`` and ``=mlite`` (verl's scripts choose Megatron-Lite
  with ``actor@actor_rollout_ref.actor=mlite_actor``) are named substitutions (:data:`SUBSTITUTED_ENGINES`): VeOmni and
  TorchTitan are trained by rlcore's FSDP engine, MindSpeed and Megatron-Lite (:mod:`rlcore.config.mlite`) by its
  Megatron engine, their sections' keys with the same meaning renamed (:data:`rlcore.config.aliases.ENGINE_ALIASES`)
  and their speed choices kept for a plan note (:func:`noted_engine_key`). Another engine rlcore does not have
  (``automodel``, ...) is an error naming it. ``<role>.strategy=fsdp_turbo`` is a named substitution too
  (:data:`SUBSTITUTED_STRATEGIES`): rlcore's FSDP engine trains verl's FSDP-Turbo.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlcore.config.problems import ConfigError, ConfigFileError


def _merged(*fragments: dict[str, Any]) -> dict[str, Any]:
    """The config fragments merged in order, later keys winning at every depth."""
    return cast(dict[str, Any], OmegaConf.to_container(OmegaConf.merge(*fragments)))


_MEGATRON: dict[str, Any] = {"actor_rollout_ref": {"actor": {"strategy": "megatron"}}}
#: what verl's one-step-off and fully-async configs add to ppo_trainer that rlcore has: the rollout's own pool
#: (rollout.nnodes, rollout.n_gpus_per_node: split placement, rlcore.config.rollout_pool), the behaviour policy's
#: log-probs, and training against them (verl's actor.use_rollout_log_probs=true with bypass_mode: rlcore's
#: bypass_mode alone)
_OFF_POLICY: dict[str, Any] = {
    "rollout": {"nnodes": 1, "n_gpus_per_node": 8},
    "actor_rollout_ref": {"rollout": {"calculate_log_probs": True}},
    "algorithm": {"rollout_correction": {"bypass_mode": True}},
}
#: verl's one-step-off trainer (verl/experimental/one_step_off_policy): one batch generated ahead
_ONE_STEP_OFF = _merged(_OFF_POLICY, {"async_training": {"enable": True}})
#: verl's fully-async trainer (verl/experimental/fully_async_policy), which verl runs as V1's separate_async: its
#: async_training defaults (rlcore.config.async_training maps them) and its rollout's prompt count
_FULLY_ASYNC = _merged(
    _OFF_POLICY,
    {
        "rollout": {"total_rollout_steps": 100},
        "trainer": {"v1": {"trainer_mode": "separate_async"}},
        "async_training": {
            "staleness_threshold": 0.1,
            "trigger_parameter_sync_step": 4,
            "require_batches": 1,
            "partial_rollout": True,
        },
    },
)
#: verl's config names that rlcore provides without a file (verl's own YAML files' settings that rlcore has)
BUILTIN_CONFIGS: dict[str, dict[str, Any]] = {
    "ppo_trainer": {},
    "ppo_megatron_trainer": _MEGATRON,
    "one_step_off_ppo_trainer": _ONE_STEP_OFF,
    "one_step_off_ppo_megatron_trainer": _merged(_ONE_STEP_OFF, _MEGATRON),
    "fully_async_ppo_trainer": _FULLY_ASYNC,
    "fully_async_ppo_megatron_trainer": _merged(_FULLY_ASYNC, _MEGATRON),
}
#: verl 0.10's ``model_engine`` choices that rlcore has -> the training backend (``strategy``) each selects
MODEL_ENGINES: dict[str, str] = {"dp": "fsdp", "megatron": "megatron"}
#: verl's engines whose library does not run here, trained by the rlcore engine nearest to them: ``model_engine``
#: name -> (the strategy it selects, its name, the marker key it sets in each section it covers: verl's own
#: ``<section>.<engine>.strategy``, with verl's value; the plan's substitution line reads it)
SUBSTITUTED_ENGINES: dict[str, tuple[str, str, dict[str, str]]] = {
    "veomni": ("fsdp", "VeOmni", {"veomni": "veomni"}),
    "torchtitan": ("fsdp", "TorchTitan", {"torchtitan": "torchtitan"}),
    "mindspeed": ("megatron", "MindSpeed", {"mindspeed": "mindspeed_megatron"}),
    "mlite": ("megatron", "Megatron-Lite", {"engine": "mlite"}),
}
#: the optimizer defaults verl's VeOmni engine brings (its ``VeOmniOptimizerConfig``: a cosine schedule; its
#: ``lr_min=0``, ``lr_start=0`` and ``lr_decay_ratio=1`` are rlcore's cosine with ``min_lr_ratio=0``)
ENGINE_OPTIM_DEFAULTS: dict[str, dict[str, Any]] = {"veomni": {"lr_scheduler_type": "cosine"}}
#: the keys of a substituted engine's section that change speed and not the numbers: accepted as given and named
#: in a plan note (rlcore-plugin-fsdp's and rlcore-plugin-megatron's ``plan_lines``); ``*`` ends a prefix
NOTED_ENGINE_KEYS: dict[str, tuple[str, ...]] = {
    "veomni": (
        "strategy",
        "attn_implementation",
        "moe_implementation",
        "cross_entropy_loss_implementation",
        "rms_norm_implementation",
        "swiglu_mlp_implementation",
        "rotary_pos_emb_implementation",
        "rms_norm_gated_implementation",
        "causal_conv1d_implementation",
        "chunk_gated_delta_rule_implementation",
        "load_balancing_loss_implementation",
        "enable_full_shard",
        "enable_reentrant",
        "force_use_huggingface",
        "activation_gpu_limit",
        "basic_modules",
        "init_device",
    ),
    "torchtitan": (
        "strategy",
        "attn_type",
        "spmd_backend",
        "activation_checkpoint",
        "reshard_after_forward",
        "max_seq_len",
        "forward_prefetch",
        "use_orig_params",
        "mixed_precision",
        "dtype",
        "data_parallel_size",
    ),
    "mindspeed": ("strategy",),
}
#: verl's strategies that are an implementation detail of an rlcore engine: ``<role>.strategy`` value -> (rlcore's
#: strategy, verl's own marker key under the role, which verl's config copies from the role's strategy). verl's
#: ``strategy=fsdp_turbo`` is its FSDP engine wrapping the model in Huawei's FSDPTurbo: only its data-parallel
#: sharding means what rlcore's FSDP2 engine does, which trains it (rlcore-plugin-fsdp prints the plan line)
SUBSTITUTED_STRATEGIES: dict[str, tuple[str, str]] = {"fsdp_turbo": ("fsdp", "fsdp_config.strategy")}
#: the keys of FSDP-Turbo's ``<role>.fsdp_config.turbo_config`` whose meaning rlcore's FSDP engine has -> the role's
#: key. verl's config carries ``turbo_config`` under every FSDP role and reads it only with ``strategy=fsdp_turbo``, so
#: they are not aliases: :func:`resolve_turbo` moves them for the roles that chose FSDP-Turbo. Turbo's context
#: parallelism is Ulysses (heads split with all-to-all), as rlcore's sequence parallelism is.
TURBO_SAME: dict[str, str] = {
    "distributed.fully_shard_parallel_size": "fsdp_config.fsdp_size",
    "distributed.ulysses_parallel_size": "ulysses_sequence_parallel_size",
    "distributed.fsdp_plan.param_dtype": "fsdp_config.dtype",
    "distributed.fsdp_plan.reduce_dtype": "fsdp_config.mixed_precision.reduce_dtype",
}
#: the keys of FSDP-Turbo's ``turbo_config`` that change speed and not the numbers: accepted as given and named in a
#: plan note; each is a prefix (a module plan is a mapping: its keys sit below it)
NOTED_TURBO_KEYS = (
    "distributed.fsdp_plan.fsdp_implementation",
    "distributed.fsdp_plan.num_to_forward_prefetch",
    "distributed.fsdp_plan.num_to_backward_prefetch",
    "distributed.fsdp_plan.apply_modules",
    "distributed.fsdp_plan.hook_modules",
    "memory.recompute",
    "memory.recompute_plan",
)
#: values of those keys that are not speed choices (they ask for hardware rlcore does not run on)
REFUSED_ENGINE_VALUES: dict[str, tuple[Any, ...]] = {"init_device": ("npu",)}
#: verl's engines rlcore does not have, by their ``model_engine`` name
FOREIGN_ENGINES: dict[str, str] = {"automodel": "NeMo AutoModel"}
#: the roles with an engine section (``<role>.fsdp_config``, ``<role>.megatron``, ``<role>.veomni``, ...)
ENGINE_ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")
#: the command-line keys that select the engine of every role (verl 0.10's defaults group)
ENGINE_KEYS = ("model_engine", "actor_rollout_ref.actor.model_engine")
#: verl 0.10's per-role engine groups (``group@package=<engine>_<group>``) -> the section whose strategy the
#: choice sets
ENGINE_GROUPS: dict[str, str] = {
    "actor@actor_rollout_ref.actor": "actor_rollout_ref.actor",
    "ref@actor_rollout_ref.ref": "actor_rollout_ref.ref",
    "critic@critic": "critic",
}
#: the Python packages of configs verl's scripts add to ``hydra.searchpath`` whose configs rlcore has built in -> what
#: they hold (``pkg://verl_mlite.config``: Megatron-Lite's ``mlite_actor``, a named substitution)
SEARCHED_PACKAGES: dict[str, str] = {"pkg://verl_mlite.config": "verl's Megatron-Lite engine configs (mlite_actor)"}
#: the command-line key of Hydra's search path
SEARCH_PATH_KEY = "hydra.searchpath"
_OPTIONS = {"--config-path": "config_path", "-cp": "config_path", "--config-name": "config_name", "-cn": "config_name"}


@dataclass
class CommandLine:
    """The arguments of ``rlcore run`` / ``rlcore config show``, sorted by kind."""

    files: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    config_path: str | None = None
    config_name: str | None = None


@dataclass
class Source:
    """One config fragment and where it came from (named in error messages)."""

    label: str
    fragment: dict[str, Any]


def parse_command_line(args: Sequence[str]) -> CommandLine:
    """Sort arguments into YAML files, ``key=value`` overrides and Hydra's ``--config-path/--config-name``."""
    line = CommandLine()
    words = iter(args)
    for word in words:
        if not word.strip():  # an empty word, e.g. from a shell line continuation followed by a space
            continue
        flag, equals, value = word.partition("=")
        if flag in _OPTIONS:
            if not equals:
                value = next(words, "")
            if not value:
                raise ConfigError(f"{flag} needs a value")
            setattr(line, _OPTIONS[flag], value)
        elif not equals and word.endswith((".yaml", ".yml")):
            line.files.append(word)
        else:
            line.overrides.append(word)
    if line.config_path is not None and line.config_name is None:
        raise ConfigError(f"--config-path {line.config_path} is given without --config-name")
    return line


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML parse error in one line: ``line L, column C: problem (while ... at line L', column C')``."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return " ".join(str(exc).split())
    mark = exc.problem_mark
    text = f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    if exc.context and exc.context_mark is not None:
        start = exc.context_mark
        text += f" ({exc.context} at line {start.line + 1}, column {start.column + 1})"
    elif exc.context:
        text += f" ({exc.context})"
    return text


def _parse_problem(text: str, exc: yaml.YAMLError) -> str:
    """The problem of ``text``, which OmegaConf's YAML reader refused with ``exc``: PyYAML's pure-Python
    parser names it better than the C one OmegaConf uses (the character, what was expected), so its
    problem is given when it refuses the text too; else (a repeated key) OmegaConf's."""
    try:
        yaml.load(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as plain:
        return _yaml_problem(plain)
    return _yaml_problem(exc)


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping in the YAML file ``path``, read as verl reads its config files: with OmegaConf's YAML rules
    (``1e-5`` is a float, a repeated key is an error) and every ``${...}`` interpolation kept as written, to be
    resolved with the whole config. A :class:`ConfigFileError` names the file (and, for a parse error, the
    line and column)."""
    if not path.is_file():
        raise ConfigFileError(f"config file {str(path)!r} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
        data = OmegaConf.to_container(OmegaConf.load(io.StringIO(text)), resolve=False) or {}
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"config file {str(path)!r} is not valid YAML: {_parse_problem(text, exc)}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"config file {str(path)!r} cannot be read: {exc}") from exc
    except OmegaConfBaseException as exc:
        raise ConfigFileError(f"config file {str(path)!r} cannot be read as a config: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigFileError(f"config file {str(path)!r} must contain a mapping at the top level")
    return cast(dict[str, Any], data)  # YAML keys may be numbers too; the key checks name them


def is_engine_choice(key: str) -> bool:
    """Whether the command-line ``key`` selects verl 0.10's engine defaults (:func:`engine_choice`)."""
    return key in ENGINE_KEYS or key in ENGINE_GROUPS


def engine_choice(key: str, value: Any) -> Source:
    """The engine defaults that ``key=value`` selects (``model_engine=megatron``,
    ``actor@actor_rollout_ref.actor=megatron_actor``): the strategy of the section it covers.

    Raises :class:`ConfigError` naming the key for an engine rlcore does not have or a malformed option.
    """
    option = str(value)
    if key in ENGINE_KEYS:
        engine, section = option, "actor_rollout_ref.actor"  # the ref and the critic follow the actor
    else:
        suffix = "_" + key.split("@", 1)[0]
        if not option.endswith(suffix):
            raise ConfigError(f"{key}={option}: verl's options of this group end in {suffix!r} (dp{suffix})")
        engine, section = option[: -len(suffix)], ENGINE_GROUPS[key]
    if engine in SUBSTITUTED_ENGINES:
        return Source(f"{key}={option}", _substituted(engine, section if key in ENGINE_GROUPS else None))
    if engine not in MODEL_ENGINES:
        known = " and ".join(MODEL_ENGINES)
        name = FOREIGN_ENGINES.get(engine)
        what = f"verl's {name} engine is not in rlcore" if name else f"{engine!r} is not an engine verl or rlcore has"
        raise ConfigError(
            f"{key}={option}: {what} (rlcore has model_engine={known}; DeepSpeed is "
            "actor_rollout_ref.actor.strategy=deepspeed)"
        )
    return Source(f"{key}={option}", _under(section, {"strategy": MODEL_ENGINES[engine]}))


def _substituted(engine: str, section: str | None) -> dict[str, Any]:
    """The defaults of a substituted engine (:data:`SUBSTITUTED_ENGINES`) for the role ``section`` (``None``: every
    role, as ``model_engine=`` selects; the reference and the critic follow the actor's strategy): the strategy,
    verl's marker key and, for the trained roles, the engine's optimizer defaults."""
    strategy, _, marker = SUBSTITUTED_ENGINES[engine]
    optim = ENGINE_OPTIM_DEFAULTS.get(engine, {})
    fragment: dict[str, Any] = {}
    for role in ENGINE_ROLES if section is None else (section,):
        values: dict[str, Any] = {name: {"strategy": value} for name, value in marker.items()}
        if section is not None or role == "actor_rollout_ref.actor":
            values["strategy"] = strategy
        if optim and role != "actor_rollout_ref.ref":
            values["optim"] = dict(optim)
        _merge(fragment, _under(role, values))
    return fragment


def _merge(base: dict[str, Any], fragment: dict[str, Any]) -> None:
    for key, value in fragment.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def substituted_strategy(key: str, value: Any) -> dict[str, Any] | None:
    """The keys ``<role>.strategy=fsdp_turbo`` stands for (:data:`SUBSTITUTED_STRATEGIES`): rlcore's strategy and
    verl's marker (``<role>.fsdp_config.strategy=fsdp_turbo``); None for another key or value."""
    role, _, name = key.rpartition(".")
    if name != "strategy" or role not in ENGINE_ROLES or not isinstance(value, str):
        return None
    if value not in SUBSTITUTED_STRATEGIES:
        return None
    strategy, marker = SUBSTITUTED_STRATEGIES[value]
    return {key: strategy, f"{role}.{marker}": value}


def _noted_turbo_key(key: str, value: Any) -> bool:
    """Whether ``key=value`` is FSDP-Turbo's marker or one of its speed choices (:data:`NOTED_TURBO_KEYS`)."""
    role = next((r for r in ENGINE_ROLES if key.startswith(r + ".")), None)
    if role is None:
        return False
    rest = key[len(role) + 1 :]
    if rest in (marker for _, marker in SUBSTITUTED_STRATEGIES.values()):
        return value in SUBSTITUTED_STRATEGIES
    below = rest.removeprefix("fsdp_config.turbo_config.")
    kept = (*TURBO_SAME, *NOTED_TURBO_KEYS)
    return below != rest and any(below == k or below.startswith(k + ".") for k in kept)


def resolve_turbo(config: DictConfig) -> list[str]:
    """For each role that chose FSDP-Turbo (its marker ``fsdp_config.strategy=fsdp_turbo``), set the role's keys from
    its ``turbo_config`` keys of the same meaning (:data:`TURBO_SAME`; Turbo's values govern, as in verl's engine); the
    Ulysses size only when above 1, where the role's own must be 1 (verl refuses both). The moved keys leave
    ``turbo_config``, which then holds the speed choices only. Returns the problems."""
    problems = []
    for role in ENGINE_ROLES:
        marker = OmegaConf.select(config, f"{role}.fsdp_config.strategy")
        turbo = OmegaConf.select(config, f"{role}.fsdp_config.turbo_config")
        if marker not in SUBSTITUTED_STRATEGIES or not isinstance(turbo, DictConfig):
            continue
        kept = cast("dict[str, Any]", OmegaConf.to_container(turbo))
        for key, target in TURBO_SAME.items():
            value = _pop(kept, key)
            if value is None:
                continue
            if target == "ulysses_sequence_parallel_size":
                if value == 1:
                    continue
                if OmegaConf.select(config, f"{role}.{target}") not in (1, value):
                    problems.append(
                        f"{role}.fsdp_config.turbo_config.{key}={value} and {role}.{target}="
                        f"{OmegaConf.select(config, f'{role}.{target}')}: verl's FSDP-Turbo refuses both its context "
                        f"parallelism and verl's Ulysses; set one (rlcore's is {role}.{target})"
                    )
                    continue
            OmegaConf.update(config, f"{role}.{target}", value, merge=False)
        OmegaConf.update(config, f"{role}.fsdp_config.turbo_config", kept, merge=False)
    return problems


def _pop(tree: dict[str, Any], dotted: str) -> Any:
    """Remove the dotted key from the nested ``tree`` and return its value (None when absent); a mapping it leaves
    empty goes too."""
    name, _, rest = dotted.partition(".")
    if not rest:
        return tree.pop(name, None)
    below = tree.get(name)
    if not isinstance(below, dict):
        return None
    value = _pop(below, rest)
    if not below:
        del tree[name]
    return value


def noted_engine_key(key: str, value: Any) -> bool:
    """Whether ``key=value`` is a speed choice of a substituted engine's section (:data:`NOTED_ENGINE_KEYS`,
    :data:`NOTED_TURBO_KEYS`) or FSDP-Turbo's marker, kept in the config as given for the plan's note; a value in
    :data:`REFUSED_ENGINE_VALUES` is not."""
    if _noted_turbo_key(key, value):
        return True
    role, _, rest = key.rpartition(".")
    role, _, engine = role.rpartition(".")
    if role not in ENGINE_ROLES or engine not in NOTED_ENGINE_KEYS or rest not in NOTED_ENGINE_KEYS[engine]:
        return False
    if rest == "strategy":  # verl's own marker: one value only
        return value == SUBSTITUTED_ENGINES[engine][2][engine]
    return value not in REFUSED_ENGINE_VALUES.get(rest, ())


def named_config(name: str, config_path: str | None, search: Sequence[Path] = ()) -> list[Source]:
    """The sources of ``--config-name NAME`` (looked up in ``--config-path``, default the current folder, then in the
    ``search`` folders)."""
    return _named(name, [Path(config_path or "."), *search], f"--config-name={name}", ())


def config_file(path: str) -> list[Source]:
    """The sources of one YAML file given on the command line: its ``defaults:`` list expanded."""
    return _load(Path(path), [], ())


def _named(name: str, folders: list[Path], referrer: str, stack: tuple[Path, ...]) -> list[Source]:
    stem = name[:-5] if name.endswith(".yaml") else name
    for folder in folders:
        candidate = folder / f"{stem}.yaml"
        if candidate.is_file():
            return _load(candidate, folders, stack)
    if stem in BUILTIN_CONFIGS:
        return [Source(f"verl's {stem}", BUILTIN_CONFIGS[stem])]
    searched = ", ".join(str(f) for f in folders)
    raise ConfigFileError(
        f"{referrer}: no {stem}.yaml in {searched}; without a file, rlcore knows verl's {', '.join(BUILTIN_CONFIGS)}"
    )


def _load(path: Path, search: list[Path], stack: tuple[Path, ...]) -> list[Source]:
    resolved = path.resolve()
    if resolved in stack:
        raise ConfigFileError(f"config file {str(path)!r}: its defaults list includes itself")
    stack = (*stack, resolved)
    data = read_yaml(path)
    label = f"config file {str(path)!r}"
    defaults = data.pop("defaults", None)
    folders = [path.parent, *_search_path(data.pop("hydra", None), label), *search]
    if defaults is None:
        return [Source(label, data)]
    if not isinstance(defaults, list):
        raise ConfigFileError(f"{label}: 'defaults' must be a list")
    entries = defaults if "_self_" in defaults else [*defaults, "_self_"]
    sources: list[Source] = []
    for entry in entries:
        if entry == "_self_":
            sources.append(Source(label, data))
        elif isinstance(entry, str):
            sources += _named(entry, folders, f"{label}: defaults entry {entry!r}", stack)
        elif isinstance(entry, dict) and len(entry) == 1:
            sources += _group(*next(iter(entry.items())), folders, label, stack)
        else:
            raise ConfigFileError(f"{label}: defaults entry {entry!r} is not a config name or a 'group: option' pair")
    return sources


def _group(key: str, option: Any, folders: list[Path], label: str, stack: tuple[Path, ...]) -> list[Source]:
    """``group@package: option`` → ``group/option.yaml`` with its keys placed under ``package``."""
    if key.startswith(("override ", "optional ")):
        raise ConfigFileError(f"{label}: defaults entry {key!r}: Hydra's override/optional entries are not supported")
    if option is None:
        return []
    group, _, package = key.partition("@")
    sources = _named(f"{group}/{option}", folders, f"{label}: defaults entry {key}: {option}", stack)
    package = package or group.replace("/", ".")
    if package == "_global_":
        return sources
    return [Source(s.label, _under(package, s.fragment)) for s in sources]


def _under(package: str, fragment: dict[str, Any]) -> dict[str, Any]:
    for part in reversed(package.split(".")):
        fragment = {part: fragment}
    return fragment


def _search_path(hydra: Any, label: str) -> list[Path]:
    """The existing folders of ``hydra.searchpath`` (``file://`` entries, relative to the current folder)."""
    if hydra is None:
        return []
    if not isinstance(hydra, dict) or set(hydra) - {"searchpath"}:
        others = sorted(set(hydra) - {"searchpath"}) if isinstance(hydra, dict) else [repr(hydra)]
        raise ConfigFileError(
            f"{label}: hydra.{', hydra.'.join(others)}: Hydra's own settings have no effect in rlcore "
            f"(only hydra.searchpath is read)"
        )
    folders = []
    for entry in hydra.get("searchpath") or []:
        text = str(entry)
        if text.startswith("file://") and Path(text[len("file://") :]).is_dir():
            folders.append(Path(text[len("file://") :]))
        elif text.startswith("pkg://") and text not in SEARCHED_PACKAGES:
            raise ConfigFileError(
                f"{label}: hydra.searchpath entry {text!r}: rlcore reads configs from file:// folders only (the "
                f"packages it stands in for: {', '.join(SEARCHED_PACKAGES)})"
            )
    return folders


def command_line_search_path(value: Any) -> list[Path]:
    """The folders of ``hydra.searchpath=[...]`` given on the command line (looked in for ``--config-name`` and the
    entries of ``defaults:`` lists, as a YAML file's ``hydra.searchpath``)."""
    return _search_path({"searchpath": value if isinstance(value, list) else [value]}, "command line")
