"""verl's GSM8K interaction (``verl.interactions.gsm8k_interaction.Gsm8kInteraction``, registered as ``gsm8k``):
a user that says "try again" until the assistant's last number is the sample's ground truth."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rlcore.api import Interaction, InteractionTurn

__all__ = ["Gsm8kInteraction"]

_LAST_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


class Gsm8kInteraction(Interaction):
    """verl's GSM8K interaction: reward 1 and stop when the assistant's last number equals the sample's
    ``interaction_kwargs.ground_truth``, else ask it to try again (reward 0)."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        self._truth: dict[str, str] = {}

    async def start(self, instance_id: str, **kwargs: Any) -> None:
        """Remember the episode's ground truth."""
        self._truth[instance_id] = str(kwargs.get("ground_truth", "")).strip()

    async def respond(self, instance_id: str, messages: list[dict[str, Any]]) -> InteractionTurn:
        """Check the assistant's last number against the ground truth."""
        content = str(messages[-1].get("content", "")) if messages else ""
        numbers = _LAST_NUMBER.findall(content.split("####")[-1])
        answer = numbers[-1].replace(",", "") if numbers else ""
        if answer and answer == self._truth.get(instance_id):
            return InteractionTurn("Your response is correct!", reward=1.0, done=True)
        return InteractionTurn(
            "Your response is incorrect! You need to reflect on your answer and try again.", reward=0.0
        )

    async def finish(self, instance_id: str) -> None:
        """Forget the episode."""
        self._truth.pop(instance_id, None)
