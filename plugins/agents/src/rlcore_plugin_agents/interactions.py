"""verl's interaction YAML (``interaction: [{name, class_name, config}]``, at
``actor_rollout_ref.rollout.multi_turn.interaction_config_path``): the interactions of a run, by name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlcore.api import MULTI_TURN_KEY, Interaction, RLCoreError, tool_classes

if TYPE_CHECKING:
    from rlcore.api import Registry

__all__ = ["load_interactions"]


def load_interactions(path: str, registry: Registry) -> dict[str, Interaction]:
    """The interactions of verl's interaction YAML at ``path``, by name, their classes resolved in ``registry``."""
    key = f"{MULTI_TURN_KEY}.interaction_config_path"
    found: dict[str, Interaction] = {}
    for where, entry, cls in tool_classes(path, key, "interaction", "interaction", registry):
        name = str(entry.get("name") or cls.__name__)
        if name in found:
            raise RLCoreError(f"{where}: a second interaction named {name!r}")
        found[name] = cls({**(entry.get("config") or {}), "name": name})
    return found
