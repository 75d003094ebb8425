"""The interaction ``{{ cookiecutter.hyphenated }}`` (``class_name: {{ cookiecutter.hyphenated }}`` in the YAML at
``actor_rollout_ref.rollout.multi_turn.interaction_config_path``).

What it does: a user who wants the answer the sample names (``extra_info.interaction_kwargs.expected``) to
appear in the assistant's reply: reward 1 and the episode ends when it does, otherwise it asks again
(reward 0). rlcore calls :meth:`respond` after each assistant turn without tool calls, up to
``multi_turn.max_user_turns`` times; the rewards are in each sample's ``extra_info.turn_scores`` for the
reward function.

What to change: :meth:`ExpectsAnswer.respond`. ``tests/test_interaction.py`` runs rlcore's contract suite.
"""

from __future__ import annotations

from typing import Any

from rlcore.api import Interaction, InteractionTurn


class ExpectsAnswer(Interaction):
    """Ends the episode with reward 1 once the expected answer appears."""

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._expected: dict[str, str] = {}

    async def start(self, instance_id: str, **kwargs: Any) -> None:
        """Remember what this episode expects."""
        self._expected[instance_id] = str(kwargs.get("expected", ""))

    async def respond(self, instance_id: str, messages: list[dict[str, Any]]) -> InteractionTurn:
        """Reward 1 and stop when the expected text is in the last assistant message."""
        expected = self._expected.get(instance_id, "")
        if expected and expected in str(messages[-1].get("content", "")):
            return InteractionTurn("Thank you.", reward=1.0, done=True)
        return InteractionTurn("That is not what I asked. Please try again.", reward=0.0)

    async def finish(self, instance_id: str) -> None:
        """Forget the episode."""
        self._expected.pop(instance_id, None)
