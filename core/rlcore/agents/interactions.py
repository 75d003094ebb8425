"""Interactions (kind ``interaction``): a user simulator or environment that answers the assistant between turns.

verl's interaction YAML (``interaction: [{name, class_name, config}]``, at
``actor_rollout_ref.rollout.multi_turn.interaction_config_path``) lists them; a sample picks one by
``extra_info.interaction_kwargs.name`` (the only one when there is one). After each assistant turn without a
tool call the loop asks the interaction for a reply; it may end the episode and give a reward.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rlcore.agents.settings import MULTI_TURN_KEY
from rlcore.agents.tools import _plain, class_entries
from rlcore.api.components import InteractionTurn
from rlcore.errors import RLCoreError

if TYPE_CHECKING:
    from rlcore.registry import Registry

__all__ = ["Interaction", "InteractionTurn", "load_interactions"]


class Interaction:
    """Base class of interactions; override :meth:`respond` (and :meth:`start`/:meth:`finish` for state).

    Args:
        config: the ``config`` mapping of its entry in the interaction YAML (``name`` is added).
    """

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        self.config = dict(config or {})
        self.name = str(self.config.get("name", type(self).__name__))

    async def start(self, instance_id: str, **kwargs: Any) -> None:
        """Begin an episode; ``kwargs`` are the sample's ``extra_info.interaction_kwargs``."""
        return None

    async def respond(self, instance_id: str, messages: list[dict[str, Any]]) -> InteractionTurn:
        """Reply to the conversation so far (the last message is the assistant's)."""
        raise NotImplementedError(f"{type(self).__name__}.respond")

    async def finish(self, instance_id: str) -> None:
        """End the episode (called once, also after failures)."""
        return None


def load_interactions(path: str, registry: Registry) -> dict[str, Interaction]:
    """The interactions of verl's interaction YAML at ``path``, by name, their classes resolved in ``registry``."""
    key = f"{MULTI_TURN_KEY}.interaction_config_path"
    found: dict[str, Interaction] = {}
    for where, entry, cls in class_entries(path, key, "interaction", "interaction", registry):
        name = str(entry.get("name") or cls.__name__)
        if name in found:
            raise RLCoreError(f"{where}: a second interaction named {name!r}")
        found[name] = cls({**_plain(entry.get("config") or {}), "name": name})
    return found
