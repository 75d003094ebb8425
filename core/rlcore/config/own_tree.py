"""A plugin's own config tree, loaded with ``rlcore run``'s rules (``rlcore sft``'s verl SFT keys, for one).

:func:`load_config_tree` merges a plugin's defaults, an optional base source (a bundled task's settings), YAML
files (with verl's ``defaults:`` lists: :func:`~rlcore.config.compose.config_file`) and ``key=value``
overrides, later winning: an unknown key is an error naming the closest known key, a value of the wrong type
is an error naming the key, and every problem is reported at once (:class:`~rlcore.config.problems.Problems`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from rlcore.config.compose import Source, config_file
from rlcore.config.loader import KnownKeys, coerce_value, flatten, known_keys, nest, parse_override, resolve_executor
from rlcore.config.problems import ConfigError, Problems


def _apply(
    merged: DictConfig,
    source: Source,
    defaults: DictConfig,
    known: KnownKeys,
    aliases: Mapping[str, str],
    unknown: tuple[str, str],
    problems: Problems,
) -> DictConfig:
    """Merge one source into ``merged``, keeping its valid keys; record a problem for every other key."""
    good: dict[str, Any] = {}
    for given, value in flatten(source.fragment).items():
        key = aliases.get(given, given)
        if known.declares(key):
            try:
                good[key] = coerce_value(key, value, defaults)
            except ConfigError as exc:
                problems.add(f"{source.label}: {exc}")
        elif key in known.sections:
            problems.add(f"{source.label}: {given!r} is a config section, not a value; set one of its keys instead")
        else:
            phrase, listing = unknown
            problems.add(f"{source.label}: {phrase} {given!r}.{known.suggestion(key)} ({listing})")
    try:
        return cast(DictConfig, OmegaConf.merge(merged, nest(good)))
    except Exception as exc:  # e.g. a mapping given where the defaults hold a list
        problems.add(f"{source.label}: cannot merge: {exc}")
        return merged


def load_config_tree(
    defaults: DictConfig,
    files: Iterable[str] = (),
    overrides: Iterable[str] = (),
    *,
    problems: Problems,
    base: Source | None = None,
    aliases: Mapping[str, str] | None = None,
    unknown: str = "unknown config key",
    listing: str = "`rlcore config show` lists every key",
) -> DictConfig:
    """A plugin's config: ``defaults`` (its whole key tree), then ``base``, the YAML ``files`` and the
    ``key=value`` ``overrides``, later winning; resolved, with ``trainer.executor=auto`` made concrete when the
    tree has a ``trainer`` section.

    Every bad key or value is recorded in ``problems`` (the config then holds the valid keys only, so later
    checks can run too); a config whose interpolations cannot resolve raises at once. ``aliases`` maps older
    spellings to the keys of ``defaults``; an unknown key is reported as ``<unknown> 'key'. Did you mean ...?
    (<listing>)``.

    Example: ``load_config_tree(OmegaConf.create({"lr": 1.0}), [], ["lr=2"], problems=Problems())``.
    """
    known = known_keys(defaults)
    sources: list[Source] = [base] if base is not None else []
    for path in files:
        with problems.collect():
            sources += config_file(path)
    dotted: dict[str, Any] = {}
    for text in overrides:
        with problems.collect():
            key, value, _ = parse_override(text)
            dotted[key] = value
    sources.append(Source("command line", nest(dotted)))
    merged = defaults
    for source in sources:
        merged = _apply(merged, source, defaults, known, aliases or {}, (unknown, listing), problems)
    try:
        OmegaConf.resolve(merged)
    except Exception as exc:  # nothing later can be checked on an unresolved config
        problems.add(f"cannot resolve the config: {exc}")
        problems.raise_if_any()
    if "trainer" in merged:
        resolve_executor(merged)
    return merged
