"""Build the resolved run config from defaults, plugin sections, presets, files and overrides."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from rlcore.errors import RLCoreError

if TYPE_CHECKING:
    from rlcore.plugins import PluginManager

DEFAULTS_FILE = Path(__file__).with_name("defaults.yaml")
_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


class ConfigError(RLCoreError, ValueError):
    """A bad config key or value; the message names the key and where it came from."""


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out


def _nest(dotted: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1}`` -> ``{"a": {"b": 1}}``; nested dict values are kept."""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if isinstance(value, Mapping) and isinstance(node.get(parts[-1]), dict):
            node[parts[-1]].update(_nest(value))
        else:
            node[parts[-1]] = dict(_nest(value)) if isinstance(value, Mapping) else value
    return out


def _merge_plugin_defaults(base: dict[str, Any], manager: PluginManager) -> dict[str, Any]:
    """Merge every plugin's ``config_defaults`` into ``base``; conflicting defaults name both plugins."""
    owners = {key: "rlcore" for key in _flatten(base)}
    for impl in manager.pm.hook.config_defaults.get_hookimpls():
        record = manager.records.get(impl.plugin_name)
        if record is None or record.status == "error":
            continue
        try:
            fragment = impl.function()
        except Exception as exc:  # a plugin's bug must name the plugin, not look like a config error
            raise ConfigError(f"plugin {impl.plugin_name}: config_defaults raised {type(exc).__name__}: {exc}") from exc
        if not fragment:
            continue
        if not isinstance(fragment, Mapping):
            raise ConfigError(f"plugin {impl.plugin_name}: config_defaults must return a mapping, got {type(fragment).__name__}")
        for key, value in _flatten(_nest(fragment)).items():
            previous = owners.get(key)
            if previous is not None and previous != "rlcore":
                existing = OmegaConf.select(OmegaConf.create(base), key)
                if existing != value:
                    raise ConfigError(
                        f"config key {key!r} is declared with different defaults by {previous} "
                        f"({existing!r}) and {impl.plugin_name} ({value!r})"
                    )
            owners[key] = impl.plugin_name
        base = OmegaConf.to_container(
            OmegaConf.merge(OmegaConf.create(base), OmegaConf.create(_nest(fragment))), resolve=False
        )
    return base


def default_config(manager: PluginManager | None = None) -> DictConfig:
    """rlcore's defaults plus the sections of every loaded plugin (unresolved interpolations kept)."""
    from rlcore.plugins import load_plugins

    with DEFAULTS_FILE.open() as fh:
        base = yaml.safe_load(fh)
    base = _merge_plugin_defaults(base, manager or load_plugins())
    return OmegaConf.create(base)


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


def _check_keys(fragment: Mapping[str, Any], defaults: DictConfig, source: str, allow_new: set[str]) -> None:
    leaves, free = _known_paths(defaults)
    sections = {p.rsplit(".", 1)[0] for p in leaves if "." in p} | {p.split(".")[0] for p in leaves}
    for key, value in _flatten(fragment).items():
        if key in leaves or key in allow_new or any(key == f or key.startswith(f + ".") for f in free):
            continue
        if key in sections and isinstance(value, Mapping):
            continue
        if key in sections:
            raise ConfigError(f"{source}: {key!r} is a config section, not a value; set one of its keys instead")
        candidates = sorted(leaves | free)
        close = [c for c in candidates if c.endswith("." + key)][:1]
        close = close or difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"{source}: unknown config key {key!r}.{hint} "
            f"(`rlcore config show` lists every key; prefix with '+' to add a key on purpose)"
        )


def _check_types(merged: DictConfig, defaults: DictConfig, keys: Iterable[str], source: str) -> None:
    for key in keys:
        default = OmegaConf.select(defaults, key, throw_on_missing=False, throw_on_resolution_failure=False)
        try:
            value = OmegaConf.select(merged, key, throw_on_missing=False)
        except Exception:  # interpolation errors surface at resolve time with their own message
            continue
        if default is None or value is None or isinstance(default, str) and default.startswith("${"):
            continue
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
            continue
        if isinstance(value, bool) and bool not in expected:
            ok = False
        else:
            ok = isinstance(value, expected)
        if not ok:
            raise ConfigError(
                f"{source}: {key}={value!r} has the wrong type: expected "
                f"{' or '.join(t.__name__ for t in expected if t is not ListConfig)} "
                f"(default {default!r})"
            )


def _parse_override(text: str) -> tuple[str, Any, bool]:
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
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: cannot parse the value: {exc}") from exc
    if isinstance(value, str) and _FLOAT.match(value):  # YAML 1.1 reads 1e-6 as a string
        value = float(value)
    return key, value, add


def _load_yaml_file(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file {path!r} does not exist")
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path!r} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path!r} must contain a mapping at the top level")
    return data


def _preset_fragment(name: str, manager: PluginManager) -> dict[str, Any]:
    target = manager.registry.load("preset", name)
    fragment = target() if callable(target) else target
    if not isinstance(fragment, Mapping):
        raise ConfigError(f"preset {name!r} must be a mapping (or a callable returning one), got {type(fragment).__name__}")
    return _nest(fragment)


def load_config(
    files: Iterable[str] = (),
    overrides: Iterable[str] = (),
    presets: Iterable[str] = (),
    manager: PluginManager | None = None,
) -> DictConfig:
    """Merge defaults, plugin sections, presets, YAML files and ``key=value`` overrides; validate keys.

    Returns a resolved :class:`~omegaconf.DictConfig`. Raises :class:`ConfigError` naming the bad key.
    """
    from rlcore.plugins import load_plugins

    manager = manager or load_plugins()
    defaults = default_config(manager)
    merged = defaults
    for name in presets:
        fragment = _preset_fragment(name, manager)
        _check_keys(fragment, defaults, f"preset {name!r}", set())
        merged = OmegaConf.merge(merged, fragment)
        _check_types(merged, defaults, _flatten(fragment), f"preset {name!r}")
    for path in files:
        fragment = _load_yaml_file(path)
        _check_keys(fragment, defaults, f"config file {path!r}", set())
        merged = OmegaConf.merge(merged, fragment)
        _check_types(merged, defaults, _flatten(fragment), f"config file {path!r}")
    parsed = [_parse_override(o) for o in overrides]
    added = {key for key, _, add in parsed if add}
    dotted = {key: value for key, value, _ in parsed}
    fragment = _nest(dotted)
    _check_keys(fragment, defaults, "command line", added)
    merged = OmegaConf.merge(merged, fragment)
    _check_types(merged, defaults, dotted, "command line")
    try:
        OmegaConf.resolve(merged)
    except Exception as exc:
        raise ConfigError(f"cannot resolve the config: {exc}") from exc
    return merged


def config_to_yaml(config: DictConfig) -> str:
    """The config as YAML text (what ``rlcore config show`` prints and the run directory keeps)."""
    return OmegaConf.to_yaml(config, resolve=True)
