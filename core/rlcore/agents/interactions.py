"""Interactions (kind ``interaction``): a user simulator or environment that answers the assistant between turns.

verl's interaction YAML (``interaction: [{name, class_name, config}]``, at
``actor_rollout_ref.rollout.multi_turn.interaction_config_path``) lists them; a sample picks one by
``extra_info.interaction_kwargs.name`` (the only one when there is one). After each assistant turn without a
tool call the loop asks the interaction for a reply; it may end the episode and give a reward. The loader of
the YAML is rlcore-plugin-agents' (``rlcore_plugin_agents.interactions``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlcore.api.components import InteractionTurn

__all__ = ["Interaction", "InteractionTurn"]


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
