"""The free-form mappings of the typed config tree: the fields typed as a mapping (``dict[str, Any]``), whose keys
are the user's to choose (a library's keyword arguments, an override config, named entries), not rlcore's.

Any key may be set below such a field, with or without Hydra's ``+`` (:func:`rlcore.config.loader.load_config`);
every other key must be declared. A section class with ``TAKES_ADDED_KEYS`` (``ray_kwargs.ray_init``) is free-form
too, apart from its declared, typed keys. A mapping typed ``dict[str, X]`` with a dataclass ``X`` holds named entries of
that schema: any entry name, and in each entry only ``X``'s keys. The fields are found by their type annotation, in rlcore's sections
(:class:`~rlcore.config.schema.Sections`) and in the sections each plugin's ``config_defaults`` returns, whatever
their default holds (``distillation.teacher_models`` starts with one entry).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rlcore.config.plugin_sections import plugin_defaults
from rlcore.config.schema import Sections
from rlcore.config.sections.base import Section, field_types
from rlcore.config.sections.monitors import MONITORS_KEY, MonitorSettings

if TYPE_CHECKING:
    from rlcore.plugins import PluginManager


def _is_mapping(annotation: Any) -> bool:
    """Whether ``annotation`` is a mapping type (``dict[str, Any]``, ``Mapping[...]``, or either ``| None``)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return any(_is_mapping(arg) for arg in typing.get_args(annotation) if arg is not type(None))
    kind = origin or annotation
    return isinstance(kind, type) and issubclass(kind, Mapping)


@dataclasses.dataclass
class TypedKeys:
    """What the typed sections add to the keys the defaults declare: the free-form mappings, and the keys of the
    entries of a mapping typed ``dict[str, <dataclass>]`` (one ``*`` part stands for any entry name)."""

    #: the dotted keys of the free-form mappings (``*`` for an entry's name)
    free: set[str] = dataclasses.field(default_factory=set)
    #: the dotted keys of the entries' fields (``distillation.teacher_models.*.model_path``)
    entry_leaves: set[str] = dataclasses.field(default_factory=set)

    def update(self, other: TypedKeys) -> None:
        """Add the keys of ``other``."""
        self.free |= other.free
        self.entry_leaves |= other.entry_leaves


def _entry_type(annotation: Any) -> type | None:
    """The dataclass ``X`` of a ``dict[str, X]`` annotation (named entries of one schema), else None."""
    args = typing.get_args(annotation)
    kind = args[1] if len(args) == 2 else None
    return kind if isinstance(kind, type) and dataclasses.is_dataclass(kind) else None


def free_form_fields(kind: type, path: str, *, entry: bool = False) -> TypedKeys:
    """The free-form mappings of the dataclass ``kind`` mounted at ``path`` (empty: the root) and of its
    dataclass-typed subsections, recursively: its mapping-typed fields, each entry of a ``dict[str, X]`` field
    checked as the dataclass ``X`` (``entry``: also list the fields of ``kind`` itself as entry keys)."""
    hints = field_types(kind)
    found = TypedKeys()
    for field in dataclasses.fields(kind):
        annotation = hints[field.name]
        key = f"{path}.{field.name}" if path else field.name
        if _is_mapping(annotation):
            schema = _entry_type(annotation)
            if schema is None:
                found.free.add(key)
            else:
                found.update(free_form_fields(schema, f"{key}.*", entry=True))
        elif isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
            if getattr(annotation, "TAKES_ADDED_KEYS", False):
                found.free.add(key)
            found.update(free_form_fields(annotation, key, entry=entry))
        elif entry:
            found.entry_leaves.add(key)
    return found


def _returned_free_forms(returned: Any, path: str | None = None) -> TypedKeys:
    """The free-form keys of what a plugin's ``config_defaults`` returned: its :class:`Section` instances, mounted
    at their key in a returned mapping (``path``) or else at their ``PATH``, as
    :func:`~rlcore.config.plugin_sections.plugin_fragment` mounts them."""
    if isinstance(returned, Section):
        return free_form_fields(type(returned), returned.PATH if path is None else path)
    found = TypedKeys()
    if isinstance(returned, (list, tuple)):
        for part in returned:
            found.update(_returned_free_forms(part, path))
    elif isinstance(returned, Mapping):
        for name, value in returned.items():
            found.update(_returned_free_forms(value, f"{path}.{name}" if path else str(name)))
    return found


def free_form_keys(manager: PluginManager) -> TypedKeys:
    """The free-form mappings and entry keys of rlcore's sections and of those the loaded plugins of ``manager``
    declare."""
    found = free_form_fields(Sections, "")
    # every ``trainer.monitors.<name>`` is a monitor's section: any name (one no installed monitor owns is named by
    # the health check), and in it at least the keys every monitor has
    found.update(free_form_fields(MonitorSettings, f"{MONITORS_KEY}.*", entry=True))
    for returned in plugin_defaults(manager):
        found.update(_returned_free_forms(returned))
    return found
