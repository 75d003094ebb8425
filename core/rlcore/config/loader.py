"""Build the resolved run config from defaults, plugin sections, presets, files and overrides."""

from __future__ import annotations

import copy
import difflib
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from rlcore.config.aliases import canonical_key, rename_aliases
from rlcore.config.async_training import resolve_fully_async
from rlcore.config.compose import (
    SEARCH_PATH_KEY,
    Source,
    command_line_search_path,
    config_file,
    engine_choice,
    is_engine_choice,
    named_config,
    noted_engine_key,
    resolve_turbo,
    substituted_strategy,
)
from rlcore.config.dotted import flatten, nest
from rlcore.config.free_form import TypedKeys, free_form_keys
from rlcore.config.mlite import mlite_key, resolve_mlite
from rlcore.config.noted_keys import noted_key, resolve_noted_keys
from rlcore.config.override_value import HydraMappingError, read_value
from rlcore.config.plugin_sections import plugin_fragment
from rlcore.config.problems import ConfigError, Problems
from rlcore.config.rollout_pool import resolve_rollout_pool
from rlcore.config.run_name import name_after_presets
from rlcore.config.schema import default_tree
from rlcore.config.suggest import option_hint, synonym_key
from rlcore.config.unsupported import missing_feature_problems, prefix_match, unsupported_value_problems
from rlcore.distributions import owned_key_advice
from rlcore.registry import KIND_SPECS

if TYPE_CHECKING:
    from rlcore.plugins import PluginManager


def _merge_plugin_defaults(base: dict[str, Any], manager: PluginManager) -> dict[str, Any]:
    """Merge every plugin's ``config_defaults`` into ``base``; conflicting defaults name both plugins."""
    values = flatten(base)
    owners = dict.fromkeys(values, "rlcore")
    for impl in manager.pm.hook.config_defaults.get_hookimpls():
        record = manager.records.get(impl.plugin_name)
        if record is None or record.status == "error":
            continue
        try:
            returned = impl.function()
        except Exception as exc:  # a plugin's bug must name the plugin, not look like a config error
            raise ConfigError(f"plugin {impl.plugin_name}: config_defaults raised {type(exc).__name__}: {exc}") from exc
        for fragment in plugin_fragment(impl.plugin_name, returned):
            nested = nest(fragment)
            for key, value in flatten(nested).items():
                previous = owners.get(key)
                if previous is not None and previous != "rlcore" and values[key] != value:
                    raise ConfigError(
                        f"config key {key!r} is declared with different defaults by {previous} "
                        f"({values[key]!r}) and {impl.plugin_name} ({value!r})"
                    )
                owners[key] = impl.plugin_name
            _merge_into(base, nested)
            values = flatten(base)
    return base


def _merge_into(base: dict[str, Any], fragment: Mapping[str, Any]) -> None:
    """Merge the plain ``fragment`` into ``base`` in place, as ``OmegaConf.merge`` merges plain data: mappings
    merge key by key, anything else (a value, a list) replaces what was there."""
    for key, value in fragment.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge_into(base[key], value)
        else:
            base[key] = _plain(value)


def _plain(value: Any) -> Any:
    """``value`` with every mapping and list copied, so that the merged defaults share nothing with a plugin's."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def core_defaults() -> dict[str, Any]:
    """rlcore's own defaults as plain data (no plugin sections): the typed sections' defaults
    (:func:`rlcore.config.schema.default_tree`; ``defaults.yaml`` is rendered from them)."""
    return default_tree()


def default_config(manager: PluginManager | None = None) -> DictConfig:
    """rlcore's defaults plus the sections of every loaded plugin (unresolved interpolations kept)."""
    from rlcore.plugins import load_plugins

    defaults, _ = _defaults_and_keys(manager or load_plugins())
    return copy.deepcopy(defaults)


#: the plugin sets whose defaults :func:`_defaults_and_keys` keeps (a process uses one; tests add a few)
_KEPT_PLUGIN_SETS = 8
_DEFAULTS_BY_PLUGINS: OrderedDict[tuple[Any, ...], tuple[DictConfig, KnownKeys]] = OrderedDict()


def _defaults_and_keys(manager: PluginManager) -> tuple[DictConfig, KnownKeys]:
    """The defaults of rlcore and of ``manager``'s plugins, and the keys they declare, built once per set of
    ``config_defaults`` implementations (a plugin added to or removed from the manager makes another set): building
    them was most of a config load. The caller must not modify them (:func:`default_config` gives a copy)."""
    plugins = tuple(
        (impl.plugin_name, impl.function, getattr(manager.records.get(impl.plugin_name), "status", None))
        for impl in manager.pm.hook.config_defaults.get_hookimpls()
    )
    kept = _DEFAULTS_BY_PLUGINS.get(plugins)
    if kept is None:
        defaults = OmegaConf.create(_merge_plugin_defaults(core_defaults(), manager))
        kept = defaults, known_keys(defaults, free_form_keys(manager))
        _DEFAULTS_BY_PLUGINS[plugins] = kept
        while len(_DEFAULTS_BY_PLUGINS) > _KEPT_PLUGIN_SETS:
            _DEFAULTS_BY_PLUGINS.popitem(last=False)
    _DEFAULTS_BY_PLUGINS.move_to_end(plugins)
    return kept


@dataclass
class KnownKeys:
    """The dotted keys the defaults declare: leaves, free-form prefixes (empty mappings) and sections."""

    leaves: set[str]
    free: set[str]
    sections: set[str]
    #: the keys of named entries (``distillation.teacher_models.*.model_path``; ``*``: any entry name)
    entry_leaves: set[str] = field(default_factory=set)

    def declares(self, key: str) -> bool:
        """Whether ``key`` is a declared leaf or an entry's key, or lies below a free-form section (a ``*`` part of
        these matches any one part)."""
        parts = key.split(".")
        return (
            key in self.leaves
            or any(prefix_match(f.split("."), parts) for f in self.free)
            or any(len(e.split(".")) == len(parts) and prefix_match(e.split("."), parts) for e in self.entry_leaves)
        )

    def suggestion(self, key: str) -> str:
        """`` Did you mean 'x'?`` for the declared key that ``key`` names with another trainer's word
        (:func:`~rlcore.config.suggest.synonym_key`), else for the key of the same name in a section above it
        (``actor.policy_loss.tau_pos`` -> ``actor.tau_pos``), else for the closest declared key, or an empty
        string."""
        synonym = synonym_key(key, self.leaves)
        if synonym is not None:
            return f" Did you mean {synonym!r}? (verl's name for {key.rpartition('.')[2]})"
        candidates = sorted(self.leaves | self.free)
        parts = key.split(".")
        close = [
            a for a in (".".join([*parts[:end], parts[-1]]) for end in range(len(parts) - 2, 0, -1)) if a in self.leaves
        ]
        close = close[:1] or [c for c in candidates if c.endswith("." + key)][:1]
        close = close or difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
        return f" Did you mean {close[0]!r}?" if close else ""


def known_keys(defaults: DictConfig, typed: TypedKeys | None = None) -> KnownKeys:
    """The keys ``defaults`` declares; free-form are its empty mappings and the mappings ``typed`` names (the
    mapping-typed fields of the typed sections, with their named entries' keys:
    :func:`~rlcore.config.free_form.free_form_keys`)."""
    typed = typed or TypedKeys()
    leaves, free = _known_paths(defaults)
    sections = {p.rsplit(".", 1)[0] for p in leaves if "." in p} | {p.split(".")[0] for p in leaves}
    return KnownKeys(leaves, free | typed.free, sections, typed.entry_leaves)


def _known_paths(defaults: DictConfig) -> tuple[set[str], set[str]]:
    """All dotted leaf paths, and the free-form prefixes (empty mappings in the defaults)."""
    container = OmegaConf.to_container(defaults, resolve=False)
    leaves, free = set(), set()

    def walk(node: Any, prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict):
                if value:
                    walk(value, path + ".")
                else:
                    free.add(path)
            else:
                leaves.add(path)

    walk(container, "")
    return leaves, free


#: keys whose default is a number but which also take verl's text form, checked by their own reader
#: (``rollout_is_threshold="lower_upper"``: :func:`rlcore.algos.rollout_correction.parse_is_threshold`)
NUMBER_OR_TEXT: frozenset[str] = frozenset({"algorithm.rollout_correction.rollout_is_threshold"})


def coerce_value(key: str, value: Any, defaults: DictConfig) -> Any:
    """``value`` in the type of the default of ``key``, as verl's config accepts it; raise if it cannot be.

    An int is accepted where a float is expected, and a single string where a list is expected
    (``trainer.logger=console`` → ``[console]``); the keys of :data:`NUMBER_OR_TEXT` also take a string.
    """
    default = OmegaConf.select(defaults, key, throw_on_missing=False, throw_on_resolution_failure=False)
    if default is None or value is None or isinstance(default, str) and default.startswith("${"):
        return value
    if key in NUMBER_OR_TEXT and isinstance(value, str):
        return value
    if isinstance(value, str) and value.startswith("${"):
        return value
    if isinstance(default, (list, ListConfig)) and isinstance(value, str):
        return [value]
    expected: tuple[type, ...]
    if isinstance(default, bool):
        expected = (bool,)
    elif isinstance(default, int):
        expected = (int,)
    elif isinstance(default, float):
        expected = (int, float)
    elif isinstance(default, (list, ListConfig)):
        expected = (list, ListConfig)
    else:
        return value
    if isinstance(value, expected) and not (isinstance(value, bool) and bool not in expected):
        return value
    names = " or ".join(t.__name__ for t in expected if t is not ListConfig)
    raise ConfigError(f"{key}={value!r} has the wrong type: expected {names} (default {default!r})")


def _apply(
    merged: DictConfig, source: Source, defaults: DictConfig, known: KnownKeys, added: set[str], problems: Problems
) -> DictConfig:
    """Merge one source into ``merged``, keeping only its valid keys; record a problem for each other key.

    A key in ``added`` (given as ``+key``) is checked as any other: accepted when declared or below a free-form
    mapping; otherwise its problem says that its parent takes no added keys."""
    renamed, given, alias_problems = rename_aliases(flatten(source.fragment), source.label)
    for message in alias_problems:
        problems.add(message)
    for key, value in list(renamed.items()):
        for name, stands_for in (substituted_strategy(key, value) or {}).items():
            if name != key and renamed.get(name, stands_for) != stands_for:
                problems.add(f"{source.label}: {key}={value} sets {name}={stands_for}, not {renamed[name]!r}")
            renamed[name] = stands_for
    good: dict[str, Any] = {}
    unknown: dict[str, Any] = {}
    megatron_installed = "actor_rollout_ref.actor.megatron" in known.sections
    for key, value in renamed.items():
        shown = given.get(key, key)
        if known.declares(key) or noted_engine_key(key, value) or mlite_key(key) or noted_key(key, megatron_installed):
            try:
                good[key] = coerce_value(key, value, defaults)
            except ConfigError as exc:
                problems.add(f"{source.label}: {exc}" if shown == key else f"{source.label}: {shown}: {exc}")
        elif key in known.sections and isinstance(value, Mapping):
            good[key] = value
        elif key in known.sections:
            problems.add(f"{source.label}: {shown!r} is a config section, not a value; set one of its keys instead")
        else:
            unknown[key] = value
    feature_problems, rest = missing_feature_problems(
        unknown, source.label, given, megatron_installed=megatron_installed
    )
    for key in rest:
        shown = given.get(key, key)
        owned = owned_key_advice(key)
        if owned is not None:
            problems.add(f"{source.label}: config key {_added(shown, key, added)} is {owned}")
            continue
        hint = option_hint(key, unknown.get(key))
        if hint is not None:
            problems.add(f"{source.label}: unknown config key {_added(shown, key, added)}: {hint}")
            continue
        renamed_note = f" (rlcore's name: {key!r})" if shown != key else ""
        why = f": rlcore has no such key, and {_parent(key, known)} takes no added keys" if key in added else ""
        problems.add(
            f"{source.label}: unknown config key {_added(shown, key, added)}{renamed_note}{why}."
            f"{known.suggestion(key)} (`rlcore config show` lists every key; {FREE_FORM_HINT})"
        )
    for message in feature_problems:
        problems.add(message)
    try:
        return cast(DictConfig, OmegaConf.merge(merged, nest(good)))  # merging into a DictConfig gives one
    except Exception as exc:  # e.g. a mapping given where the defaults hold a list
        problems.add(f"{source.label}: cannot merge: {exc}")
        return merged


#: where a key may be added: what the unknown-key error says about ``+``
FREE_FORM_HINT = (
    "new keys, with or without '+', go only below a free-form mapping such as "
    "actor_rollout_ref.rollout.engine_kwargs.vllm, megatron.override_transformer_config or reward_model.reward_kwargs"
)


def _added(shown: str, key: str, added: set[str]) -> str:
    """``shown`` (the key as given) quoted, with the ``+`` it was given with."""
    return repr(f"+{shown}") if key in added else repr(shown)


def _parent(key: str, known: KnownKeys) -> str:
    """The deepest declared section above ``key`` (``'+x'``'s parent that takes no added keys), or ``the top level of
    the config``."""
    parts = key.split(".")
    for end in range(len(parts) - 1, 0, -1):
        section = ".".join(parts[:end])
        entries = (e.split(".") for e in known.entry_leaves)
        if section in known.sections or any(len(e) > end and prefix_match(e[:end], parts[:end]) for e in entries):
            return section
    return "the top level of the config"


def parse_override(text: str) -> tuple[str, Any, bool]:
    """``key=value`` from the command line -> (key, value parsed as YAML, whether it was ``+key``, an
    addition)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key=value")
    key, _, raw = text.partition("=")
    add = key.startswith("+")
    key = key.lstrip("+").strip()
    if not key:
        raise ConfigError(f"override {text!r} has an empty key")
    raw = raw.strip()
    if raw == "None":  # Python spelling, common in verl scripts
        return key, None, add
    try:
        value = read_value(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: cannot parse the value: {exc}") from exc
    except HydraMappingError as exc:
        raise ConfigError(
            f"override {text!r}: cannot read the mapping unambiguously: {exc} (write it in YAML, {{x: 1, y: 2}}, or "
            "as Hydra does, {x:1,y:2})"
        ) from exc
    return key, value, add


def preset_fragment(name: str, manager: PluginManager) -> dict[str, Any]:
    """The nested settings of the preset ``name`` (its mapping, or what its callable returns)."""
    target = manager.registry.load("preset", name)
    fragment = target() if callable(target) else target
    if not isinstance(fragment, Mapping):
        raise ConfigError(
            f"preset {name!r} must be a mapping (or a callable returning one), got {type(fragment).__name__}"
        )
    return nest(fragment)


def _refuse_a_chosen_component_as_preset(
    name: str, manager: PluginManager, defaults: DictConfig, earlier: Mapping[str, dict[str, Any]]
) -> None:
    """``--preset grpo``: no preset is called so, and the run already selects the advantage estimator (or
    policy loss) ``grpo``, by default or through an ``earlier`` preset (name -> its settings: the bundled
    task's); raise saying so. Any other unknown preset is the registry's error."""
    registry = manager.registry
    other = None if registry.has("preset", name) else registry.other_kind("preset", name)
    if other is None:
        return
    kind, component = other
    key = KIND_SPECS[kind].selected_by
    value, source = OmegaConf.select(defaults, key, default=None), "rlcore's default"
    for preset, fragment in earlier.items():
        if key in flatten(fragment):
            value, source = flatten(fragment)[key], f"preset {preset!r}"
    if value == component:
        raise ConfigError(
            f"unknown preset {name!r}: {component!r} is {'an' if kind[0] in 'aeiou' else 'a'} {kind}, and the one "
            f"this run uses already ({key}={component}, {source}): drop --preset {name}"
        )


def _sources(
    files: Iterable[str],
    presets: Mapping[str, dict[str, Any]],
    named: tuple[str | None, str | None, list[Path]],
    engines: Iterable[Source],
    problems: Problems,
) -> list[Source]:
    """Presets (name -> settings), then the ``--config-name`` config (``named``: the name, ``--config-path`` and the
    command line's ``hydra.searchpath`` folders), then the engine defaults that ``model_engine=...`` picks, then the
    YAML files, each expanded into its sources."""
    sources = [Source(f"preset {name!r}", fragment) for name, fragment in presets.items()]
    config_name, config_path, search = named
    if config_name is not None:
        with problems.collect():
            sources += named_config(config_name, config_path, search)
    sources += engines
    for path in files:
        with problems.collect():
            sources += config_file(path)
    return sources


def resolve_executor(config: DictConfig) -> None:
    """Replace ``trainer.executor=auto`` by ``local`` for a single rank and ``ray`` otherwise (as verl, which
    always uses Ray); split placement puts the rollout on ranks of its own, so it means Ray too."""
    trainer = config.trainer
    if trainer.get("executor") != "auto":
        return
    nodes, per_node = trainer.get("nnodes"), trainer.get("n_gpus_per_node")
    ranks = nodes * per_node if all(isinstance(v, int) and not isinstance(v, bool) for v in (nodes, per_node)) else 1
    trainer.executor = "ray" if ranks > 1 or trainer.get("placement") == "split" else "local"


def load_config(
    files: Iterable[str] = (),
    overrides: Iterable[str] = (),
    presets: Iterable[str] = (),
    manager: PluginManager | None = None,
    *,
    config_name: str | None = None,
    config_path: str | None = None,
    problems: Problems | None = None,
) -> DictConfig:
    """Merge defaults, plugin sections, presets, the ``--config-name`` config, YAML files and ``key=value``
    overrides; validate every key.

    A bundled task's run is named after the algorithm that runs (:mod:`rlcore.config.run_name`). Returns a
    resolved :class:`~omegaconf.DictConfig`. Every bad key or value is a problem naming it; they
    are all raised together as one :class:`ConfigError`, or, when ``problems`` is given, recorded there
    (the config is then built from the valid keys only, so that later checks can run too).
    """
    from rlcore.plugins import load_plugins

    collected = problems if problems is not None else Problems()
    manager = manager or load_plugins()
    defaults, known = _defaults_and_keys(manager)
    dotted: dict[str, Any] = {}
    added: set[str] = set()
    engines: list[Source] = []
    search: list[Path] = []
    for text in overrides:
        with collected.collect():
            key, value, add = parse_override(text)
            if key == SEARCH_PATH_KEY:  # Hydra's: where --config-name and defaults entries are looked for
                search += command_line_search_path(value)
                continue
            if is_engine_choice(key):  # a Hydra defaults group: it picks defaults, below every file and override
                engines.append(engine_choice(key, value))
                continue
            dotted[key] = value
            if add:
                added.add(canonical_key(key))
    fragments: dict[str, dict[str, Any]] = {}
    for name in presets:
        with collected.collect():
            _refuse_a_chosen_component_as_preset(name, manager, defaults, fragments)
            fragments[name] = preset_fragment(name, manager)
    sources = _sources(files, fragments, (config_name, config_path, search), engines, collected)
    sources.append(Source("command line", nest(dotted)))
    merged = defaults
    for source in sources:
        merged = _apply(merged, source, defaults, known, added, collected)
    if merged is defaults:  # no source merged: what follows resolves the config in place
        merged = copy.deepcopy(defaults)
    for message in (*resolve_turbo(merged), *resolve_mlite(merged), *resolve_noted_keys(merged)):
        collected.add(message)
    with collected.collect():
        flat = {name: flatten(fragment) for name, fragment in fragments.items()}
        name_after_presets(merged, flat, str(defaults.algorithm.adv_estimator), manager)
    try:
        OmegaConf.resolve(merged)
    except Exception as exc:  # nothing later can be checked on an unresolved config
        collected.add(f"cannot resolve the config: {exc}")
        collected.raise_if_any()
    resolve_fully_async(merged)
    for message in resolve_rollout_pool(merged):
        collected.add(message)
    resolve_executor(merged)
    for message in unsupported_value_problems(merged):
        collected.add(message)
    if problems is None:
        collected.raise_if_any()
    return merged


def config_to_yaml(config: DictConfig) -> str:
    """The config as YAML text (what ``rlcore config show`` prints and the run directory keeps)."""
    return OmegaConf.to_yaml(config, resolve=True)
