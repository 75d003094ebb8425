"""What a plugin's ``config_defaults`` hook returns, as nested defaults: a mapping (whose values may be
:class:`~rlcore.config.sections.base.Section` instances, mounted at their key), a ``Section`` instance
(mounted at its :attr:`~rlcore.config.sections.base.Section.PATH`) or a list of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlcore.config.problems import ConfigError
from rlcore.config.sections.base import Section


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
