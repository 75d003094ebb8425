"""What a plugin's ``config_defaults`` hook returns, as nested defaults: a mapping (whose values may be
:class:`~rlcore.config.sections.base.Section` instances, mounted at their key), a ``Section`` instance
(mounted at its :attr:`~rlcore.config.sections.base.Section.PATH`) or a list of them; and the core section a
component receives, extended with the fields the plugins add at its key (:func:`plugin_section`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from rlcore.config.problems import ConfigError
from rlcore.config.sections.base import Section, field_types, is_section

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from rlcore.plugins import PluginManager

_S = TypeVar("_S", bound=Section)


def _nested(path: str, tree: dict[str, Any]) -> dict[str, Any]:
    """``tree`` placed at the dotted ``path``."""
    for part in reversed(path.split(".")):
        tree = {part: tree}
    return tree


def _plain(value: Any) -> Any:
    """``value`` with every Section instance in it replaced by its defaults (recursively)."""
    if isinstance(value, Section):
        return value.tree()
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return value


def plugin_fragment(plugin: str, returned: Any) -> list[dict[str, Any]]:
    """The nested defaults of what ``plugin``'s ``config_defaults`` returned, one mapping per mounted part
    (none for None or an empty result); raises :class:`ConfigError` naming the plugin for anything else."""
    if not returned:
        return []
    parts = list(returned) if isinstance(returned, (list, tuple)) else [returned]
    fragments: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, Section):
            if not part.PATH:
                raise ConfigError(
                    f"plugin {plugin}: config_defaults returned a {type(part).__name__} without a PATH: set its "
                    "PATH, or return it inside a mapping at the key where it is mounted"
                )
            fragments.append(_nested(part.PATH, part.tree()))
        elif isinstance(part, Mapping):
            fragments.append(_plain(part))
        else:
            raise ConfigError(
                f"plugin {plugin}: config_defaults must return a mapping, a Section or a list of Sections, got "
                f"{type(part).__name__}"
            )
    return fragments


def sections_at(returned: Any, path: str) -> list[type[Section]]:
    """The classes of the :class:`Section` instances in what a ``config_defaults`` hook returned that are
    mounted at the dotted ``path`` or one level below it (by their ``PATH``, or by their key in a returned
    mapping)."""
    parts = list(returned) if isinstance(returned, (list, tuple)) else [returned] if returned else []
    mounted: list[tuple[str, Section]] = []
    for part in parts:
        if isinstance(part, Section):
            mounted.append((part.PATH, part))
        elif isinstance(part, Mapping):
            mounted += [(key, value) for key, value in part.items() if isinstance(value, Section)]
    return [type(section) for key, section in mounted if key == path or key.rpartition(".")[0] == path]


#: (base, extras) -> the class :func:`extended_section` made for them (one class per combination)
_EXTENDED: dict[tuple[type[Section], tuple[type[Section], ...]], type[Section]] = {}


def extended_section(base: type[_S], extras: tuple[type[Section], ...]) -> type[_S]:
    """``base`` (a core section) with the plugin sections ``extras``: a frozen dataclass that is an instance of
    ``base`` and of each of ``extras`` mounted at its key (with all their fields and all their checks), and
    has each of ``extras`` mounted one level below as a subsection field (DAPO's
    ``reward_model.overlong_buffer``); ``base`` itself when there are none. A subsection both declare (PRIME's
    ``reward_model.model`` keys) is extended the same way, so it keeps the core's fields too."""
    if not extras:
        return base
    made = _EXTENDED.get((base, extras))
    if made is not None:
        return cast("type[_S]", made)
    mixins = tuple(dict.fromkeys(kind for kind in extras if kind.PATH in ("", base.PATH)))
    children = {kind.PATH.rpartition(".")[2]: kind for kind in extras if kind not in mixins}
    kinds: tuple[type[Section], ...] = (*mixins, base)
    hints = {kind: field_types(kind) for kind in kinds}
    fields: list[tuple[str, Any, Any]] = []
    for name in dict.fromkeys(name for kind in kinds for name in hints[kind]):
        inner = [hints[kind][name] for kind in kinds if name in hints[kind] and is_section(hints[kind][name])]
        if len(set(inner)) > 1:
            inner_kind = extended_section(inner[-1], tuple(inner[:-1]))
            fields.append((name, inner_kind, dataclasses.field(default_factory=inner_kind)))
    fields += [(name, kind, dataclasses.field(default_factory=kind)) for name, kind in children.items()]

    def problems(self: Section) -> list[str]:
        """Every problem of the base section's and the plugin sections' own checks."""
        return [problem for kind in kinds for problem in kind.problems(self)]

    name = f"{base.__name__}With{''.join(kind.__name__ for kind in extras)}"
    made = dataclasses.make_dataclass(name, fields, bases=kinds, frozen=True, namespace={"problems": problems})
    _EXTENDED[(base, extras)] = made
    return cast("type[_S]", made)


def plugin_section(config: DictConfig, base: type[_S], manager: PluginManager) -> _S:
    """The ``base`` section of the resolved ``config`` with the sections the plugins of ``manager`` declare
    at its key and one level below (their ``config_defaults``, :func:`extended_section`): what a component of
    the section's kind receives, e.g. a policy loss the ``actor_rollout_ref.actor`` section with SAPO's
    ``tau_pos``."""
    extras = [kind for returned in plugin_defaults(manager) for kind in sections_at(returned, base.PATH)]
    return extended_section(base, tuple(extras)).from_tree(config)


def plugin_defaults(manager: PluginManager) -> Iterator[Any]:
    """What the ``config_defaults`` hook of each loaded plugin of ``manager`` returns (a plugin that failed to load
    left out)."""
    for impl in manager.pm.hook.config_defaults.get_hookimpls():
        record = manager.records.get(impl.plugin_name)
        if record is not None and record.status != "error":
            yield impl.function()
