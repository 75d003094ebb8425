"""The base of every typed config section: :class:`Section`, its checks and :func:`ref` (a default that is
another key's value).

Convention: a field's docstring is the ``#:`` comment above it (Sphinx's attribute-comment syntax); the
rendered ``defaults.yaml`` (:mod:`rlcore.config.defaults_file`) prints it next to the key.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, TypeVar

from omegaconf import DictConfig, ListConfig, OmegaConf, ValueNode

from rlcore.config.problems import ConfigError

_S = TypeVar("_S", bound="Section")


def ref(key: str) -> Any:
    """A field default that is the value of the dotted ``key`` (an OmegaConf interpolation ``${key}``,
    resolved with the rest of the config), e.g. ``grad_clip: float | None = ref("actor_rollout_ref.actor.optim.clip_grad")``."""
    return dataclasses.field(default=f"${{{key}}}")


def is_interpolation(value: Any) -> bool:
    """Whether ``value`` is an unresolved ``${key}`` reference (a default made by :func:`ref`)."""
    return isinstance(value, str) and value.startswith("${")


def _is_count(value: Any) -> bool:
    """Whether ``value`` is an int (a bool is not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """Whether ``value`` is an int or a float (a bool is not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: each dataclass's resolved field annotations (:func:`field_types`)
_FIELD_TYPES: dict[type, Mapping[str, Any]] = {}


def field_types(kind: type) -> Mapping[str, Any]:
    """The resolved type annotations of the dataclass ``kind``'s fields (:func:`typing.get_type_hints`), read once
    per class: a class's annotations do not change, and resolving them was the slowest part of reading a config."""
    found = _FIELD_TYPES.get(kind)
    if found is None:
        found = _FIELD_TYPES[kind] = types.MappingProxyType(typing.get_type_hints(kind))
    return found


class _NotPlain(Exception):
    """A node :func:`_plain_nodes` leaves to ``OmegaConf.to_container``."""


#: the types of the values :func:`_plain_nodes` copies as they are (a ``str`` unless it holds ``${`` or is ``???``)
_PLAIN_VALUES = frozenset({str, int, float, bool, type(None)})


def _plain_nodes(node: Any) -> Any:
    """``node`` (a config node) as plain data, read from its nodes' stored values; raises :class:`_NotPlain` at
    anything whose conversion is more than a copy: an interpolation, a ``???`` value, an enum, bytes or path
    value, a key that is not a ``str``, a null or missing container, a container type other than
    :class:`DictConfig` and :class:`ListConfig`."""
    if isinstance(node, ValueNode):
        value = node._value()
        if type(value) not in _PLAIN_VALUES or (type(value) is str and ("${" in value or value == "???")):
            raise _NotPlain
        return value
    content = node.__dict__["_content"]
    if type(node) is DictConfig and type(content) is dict:
        if not all(type(key) is str for key in content):
            raise _NotPlain
        return {key: _plain_nodes(child) for key, child in content.items()}
    if type(node) is ListConfig and type(content) is list:
        return [_plain_nodes(child) for child in content]
    raise _NotPlain


def to_plain(value: Any) -> Any:
    """Convert an OmegaConf container to plain Python, every ``${...}`` resolved (other values are returned
    unchanged): ``OmegaConf.to_container(value, resolve=True)``, copied straight from the stored values when the
    tree holds nothing to resolve or convert (a loaded config: the loader resolves it)."""
    if isinstance(value, (DictConfig, ListConfig)):
        try:
            return _plain_nodes(value)
        except _NotPlain:
            return OmegaConf.to_container(value, resolve=True)
    return value


def is_section(kind: Any) -> bool:
    """Whether the annotation ``kind`` is a :class:`Section` class (a subsection field)."""
    return isinstance(kind, type) and issubclass(kind, Section)


class Section:
    """A config section as a frozen dataclass whose fields hold their defaults: :attr:`PATH` is its dotted
    key (empty for a subsection mounted at several keys), :meth:`problems` its own checks."""

    #: the dotted key of the section in the tree (``actor_rollout_ref.actor``)
    PATH: ClassVar[str] = ""
    #: true: keys it does not declare may be added below it (``+key=value``), for a consumer that takes any
    #: (a library call's keyword arguments) and checks them itself (:mod:`rlcore.config.free_form`)
    TAKES_ADDED_KEYS: ClassVar[bool] = False

    def key(self, name: str) -> str:
        """The dotted key of field ``name``."""
        return f"{self.PATH}.{name}"

    def tree(self) -> dict[str, Any]:
        """The section's values as plain nested data, in field order (``${...}`` references kept)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def problems(self) -> list[str]:
        """This section's per-field problems (none by default); ``__post_init__`` raises them."""
        return []

    def __post_init__(self) -> None:
        """Raise one :class:`ConfigError` with every problem of :meth:`problems`; the defaults themselves
        (a section holding an unresolved :func:`ref`) are checked once resolved, in :meth:`from_tree`."""
        if any(is_interpolation(getattr(self, field.name)) for field in dataclasses.fields(self)):  # type: ignore[arg-type]
            return
        found = self.problems()
        if found:
            raise ConfigError(*found)

    def positive(self, name: str, *, null: bool = False) -> list[str]:
        """The problem of field ``name`` when it is not an int ≥ 1 (``null``: None is allowed)."""
        value = getattr(self, name)
        if (value is None and null) or (_is_count(value) and value > 0):
            return []
        return [f"{self.key(name)} must be a positive integer{' or null' if null else ''}, got {value!r}"]

    def non_negative(self, name: str) -> list[str]:
        """The problem of field ``name`` when it is not an int ≥ 0."""
        value = getattr(self, name)
        if _is_count(value) and value >= 0:
            return []
        return [f"{self.key(name)} must be an integer >= 0, got {value!r}"]

    def seconds(self, name: str) -> list[str]:
        """The problem of field ``name`` when it is neither null nor a number of seconds ≥ 0."""
        value = getattr(self, name)
        if value is None or (is_number(value) and value >= 0):
            return []
        return [f"{self.key(name)} must be a number of seconds >= 0 (0 or null: no limit), got {value!r}"]

    @classmethod
    def from_mapping(cls: type[_S], node: Mapping[str, Any]) -> _S:
        """This type read from ``node`` (a section's keys, e.g. ``config.critic.model``): the fields it holds take
        its values (resolved to plain data), the fields it does not declare keep this type's defaults, other keys
        are ignored. For one type read at keys whose sections declare fewer of its fields (the model an engine
        loads: :class:`~rlcore.config.sections.actor_rollout_ref.ModelConfig` read from ``critic.model`` has no
        LoRA and no kernel switches), and for a section built from a few overrides in a test."""
        hints = field_types(cls)
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            if field.name not in node:
                continue
            value = to_plain(node[field.name])
            kind = hints[field.name]
            values[field.name] = kind.from_mapping(value) if is_section(kind) and isinstance(value, Mapping) else value
        return cls(**values)

    @classmethod
    def from_tree(cls: type[_S], config: DictConfig, path: str | None = None) -> _S:
        """The section at ``path`` (default :attr:`PATH`) of the resolved ``config``; raises
        :class:`ConfigError` naming every missing key, bad choice and failed check of the section and its
        subsections. The section's node is turned into plain data once and read by :meth:`from_data`."""
        path = path or cls.PATH
        return cls.from_data(to_plain(OmegaConf.select(config, path, default=None)), path)

    @classmethod
    def from_data(cls: type[_S], data: Any, path: str) -> _S:
        """The section at the dotted ``path`` whose keys are ``data``: the node's plain data
        (:func:`to_plain`; anything but a mapping: the section is missing), its subsections read from their keys
        in it; raises :class:`ConfigError` as :meth:`from_tree` does. The entry point of a ``from_tree`` override
        that adds keys to the section's data (the vLLM engine's ``mtp``, read from the policy model)."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path} is missing from the config (it is a section of defaults.yaml)")
        hints = field_types(cls)
        values: dict[str, Any] = {}
        problems: list[str] = []
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            kind = hints[field.name]
            key = f"{path}.{field.name}"
            if is_section(kind):
                try:
                    values[field.name] = kind.from_data(data.get(field.name), key)
                except ConfigError as exc:
                    problems += exc.problems
                continue
            if field.name not in data:
                problems.append(f"{key} is missing from the config (defaults.yaml declares it)")
                continue
            value = data[field.name]
            choices = typing.get_args(kind) if typing.get_origin(kind) is Literal else ()
            if choices and value not in choices:
                problems.append(f"{key} must be one of {', '.join(map(str, choices))}, got {value!r}")
            values[field.name] = value
        if problems:
            raise ConfigError(*problems)
        return cls(**values)
