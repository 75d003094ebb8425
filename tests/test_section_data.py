"""Typed sections are read from the section's plain data (``Section.from_data``, ``to_plain``): the same sections,
the same problems in the same order, as reading every field through the OmegaConf nodes (the reader below, which
``Section.from_tree`` and ``given_section`` were before they read plain data)."""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
from omegaconf import DictConfig, ListConfig, OmegaConf

from rlcore.config import ConfigError, load_config
from rlcore.config.given_sections import given_section
from rlcore.config.schema import ActorRolloutRefConfig, Sections, TrainerConfig
from rlcore.config.sections.base import Section, field_types, is_section, ref, to_plain


def node_section(cls: type[Section], config: DictConfig, path: str) -> Section:
    """``cls`` at ``path`` read field by field through the nodes of ``config``."""
    node = OmegaConf.select(config, path, default=None)
    if not isinstance(node, DictConfig):
        raise ConfigError(f"{path} is missing from the config (it is a section of defaults.yaml)")
    hints = field_types(cls)
    values: dict[str, Any] = {}
    problems: list[str] = []
    for item in dataclasses.fields(cls):  # type: ignore[arg-type]
        kind, key = hints[item.name], f"{path}.{item.name}"
        if is_section(kind):
            try:
                values[item.name] = node_section(kind, config, key)
            except ConfigError as exc:
                problems += exc.problems
            continue
        if item.name not in node:
            problems.append(f"{key} is missing from the config (defaults.yaml declares it)")
            continue
        value = node[item.name]
        if isinstance(value, (DictConfig, ListConfig)):
            value = OmegaConf.to_container(value, resolve=True)
        choices = typing.get_args(kind) if typing.get_origin(kind) is Literal else ()
        if choices and value not in choices:
            problems.append(f"{key} must be one of {', '.join(map(str, choices))}, got {value!r}")
        values[item.name] = value
    if problems:
        raise ConfigError(*problems)
    return cls(**values)


def node_given(cls: type[Section], config: DictConfig, path: str) -> Section | None:
    """:func:`given_section` read field by field through the nodes of ``config``."""
    try:
        return node_section(cls, config, path)
    except ConfigError:
        pass
    node = OmegaConf.select(config, path)
    if not isinstance(node, DictConfig):
        return None
    hints = field_types(cls)
    section = object.__new__(cls)
    for item in dataclasses.fields(cls):  # type: ignore[arg-type]
        kind, key = hints[item.name], f"{path}.{item.name}"
        value: Any
        if is_section(kind):
            value = node_given(kind, config, key)
            if value is None:
                return None
        elif item.name not in node:
            return None
        else:
            value = node[item.name]
            if isinstance(value, (DictConfig, ListConfig)):
                value = OmegaConf.to_container(value, resolve=True)
        object.__setattr__(section, item.name, value)
    return section


def outcome(read: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """What ``read(*args)`` gives: the section's repr (types of the values included), or the problems it raised."""
    try:
        return ("section", repr(read(*args)))
    except ConfigError as exc:
        return ("problems", exc.problems)


@dataclass(frozen=True)
class Inner(Section):
    """A subsection with a choice and a checked count."""

    #: a choice
    mode: Literal["fast", "slow"] = "fast"
    #: a count of at least 1
    size: int = 1

    def problems(self) -> list[str]:
        """``size`` is positive."""
        return self.positive("size")


@dataclass(frozen=True)
class Outer(Section):
    """A section with scalars, a list, a mapping, a reference and two subsections."""

    PATH = "outer"
    #: a name
    name: str = "x"
    #: a list
    sizes: list[int] = field(default_factory=list)
    #: free-form settings
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: another key's value
    rate: float = ref("top.rate")
    #: a choice
    kind: Literal["a", "b"] = "a"
    #: one subsection
    inner: Inner = field(default_factory=Inner)
    #: another
    other: Inner = field(default_factory=Inner)


def tree(**outer: Any) -> DictConfig:
    """A config with ``top.rate`` and the ``outer`` section of :class:`Outer`'s defaults, ``outer`` replacing some
    keys (a value of ``DROP``: the key is left out)."""
    section = {**Outer().tree(), **outer}
    return OmegaConf.create({"top": {"rate": 0.5}, "outer": {k: v for k, v in section.items() if v is not DROP}})


DROP = object()

TREES = {
    "valid, with a reference, a list and a mapping": tree(sizes=[1, 2], kwargs={"a": {"b": [1, None]}}),
    "a reference into the section": tree(name="${outer.kind}", inner={"mode": "slow", "size": "${top.size}"}),
    "a missing key, a bad choice, a subsection's bad choice and missing key": tree(
        name=DROP, kind="c", inner={"mode": "medium"}, other={"mode": "slow", "size": 0}
    ),
    "a subsection's failed check": tree(other={"mode": "fast", "size": 0}),
    "a subsection missing, null, a list": tree(inner=DROP, other=None, kwargs=[1]),
    "a subsection that is a scalar": tree(inner=3),
    "keys the section does not declare": tree(extra={"deep": "${top.rate}"}, inner={"mode": "fast", "size": 2, "x": 1}),
    "a ??? below a mapping": tree(kwargs={"a": "???"}),
    "a choice that is not a string": tree(kind=1, inner={"mode": True, "size": 1}),
}


@pytest.mark.parametrize("config", TREES.values(), ids=TREES.keys())
def test_a_section_reads_from_plain_data_as_from_the_nodes(config: DictConfig) -> None:
    config.top.size = 3
    assert outcome(Outer.from_tree, config) == outcome(node_section, Outer, config, "outer")
    assert outcome(Inner.from_tree, config, "outer.other") == outcome(node_section, Inner, config, "outer.other")
    assert repr(given_section(Outer, config)) == repr(node_given(Outer, config, "outer"))


def test_the_trees_cover_every_kind_of_problem() -> None:
    found = [outcome(Outer.from_tree, config) for config in TREES.values()]
    problems = [problem for kind, listed in found if kind == "problems" for problem in listed]
    assert any(kind == "section" for kind, _ in found)
    assert "outer.name is missing from the config (defaults.yaml declares it)" in problems
    assert "outer.kind must be one of a, b, got 'c'" in problems
    assert "outer.inner.mode must be one of fast, slow, got 'medium'" in problems
    assert "outer.inner.size is missing from the config (defaults.yaml declares it)" in problems
    assert "outer.inner is missing from the config (it is a section of defaults.yaml)" in problems
    assert ".size must be a positive integer, got 0" in problems


def test_a_missing_section_is_named() -> None:
    config = OmegaConf.create({"top": {"rate": 1.0}})
    assert outcome(Outer.from_tree, config) == (
        "problems",
        ["outer is missing from the config (it is a section of defaults.yaml)"],
    )
    assert outcome(Outer.from_tree, config) == outcome(node_section, Outer, config, "outer")
    assert given_section(Outer, config) is None


@pytest.mark.parametrize(
    ("overrides", "edits"),
    [
        ([], {}),
        (
            ["trainer.total_epochs=0", "actor_rollout_ref.rollout.val_kwargs.n=0"],
            {"actor_rollout_ref.rollout.mode": "x", "actor_rollout_ref.actor.ppo_epochs": "${trainer.total_epochs}"},
        ),
        (["+actor_rollout_ref.rollout.vllm.engine_kwargs.a={b: [1, 2.5, null]}", "data.train_batch_size=3"], {}),
    ],
    ids=["defaults", "problems", "free-form keys"],
)
def test_every_section_of_a_loaded_config_reads_as_from_the_nodes(overrides: list[str], edits: dict[str, Any]) -> None:
    config = load_config(overrides=overrides)
    for key, value in edits.items():  # values the loader would refuse, and a reference
        OmegaConf.update(config, key, value)
    for item in dataclasses.fields(Sections):
        kind = field_types(Sections)[item.name]
        assert outcome(kind.from_tree, config, item.name) == outcome(node_section, kind, config, item.name)
    for cls in (ActorRolloutRefConfig, TrainerConfig):
        assert repr(given_section(cls, config)) == repr(node_given(cls, config, cls.PATH))


class Color(enum.Enum):
    """An enum value for a node."""

    RED = 1


PLAIN_CASES = {
    "nested mappings and lists": {"a": {"b": [1, 2.5, True, None, "s", {"c": []}]}, "d": {}},
    "an interpolation": {"a": 1, "b": "${a}", "c": {"d": "x${a}y", "e": "${c.d}"}},
    "an escaped interpolation": {"a": "\\${b}"},
    "a ??? value": {"a": "???", "b": ["???"]},
    "a null mapping": {"a": None, "b": {"c": None}},
    "an enum, bytes and a path": {"a": Color.RED, "b": b"x", "c": Path("p")},
    "a key that is not a string": {1: "a", "b": {2: 3}},
}


@pytest.mark.parametrize("data", PLAIN_CASES.values(), ids=PLAIN_CASES.keys())
def test_to_plain_is_omegaconfs_resolved_container(data: dict[Any, Any]) -> None:
    config = OmegaConf.create(data)
    expected = OmegaConf.to_container(config, resolve=True)
    assert repr(to_plain(config)) == repr(expected)
    assert to_plain(config) == expected
    for key, value in data.items():
        if isinstance(value, (dict, list)):  # a container below the root: references resolve from the root
            node = config[key]
            assert repr(to_plain(node)) == repr(OmegaConf.to_container(node, resolve=True))


def test_to_plain_returns_new_containers_and_leaves_other_values() -> None:
    config = OmegaConf.create({"a": {"b": [1]}})
    first, second = to_plain(config), to_plain(config)
    first["a"]["b"].append(2)
    assert second == {"a": {"b": [1]}} and OmegaConf.to_container(config) == {"a": {"b": [1]}}
    assert to_plain(5) == 5 and to_plain(None) is None and to_plain({"a": 1}) == {"a": 1}
