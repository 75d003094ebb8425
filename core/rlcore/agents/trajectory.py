"""A token-in, token-out trajectory: the ids the policy was given and the ids it produced, turn by turn."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Trajectory"]


@dataclass
class Trajectory:
    """One sample's multi-turn rollout, kept as token ids and never re-tokenized.

    ``prompt_ids`` is the prompt the first turn was generated from. ``response_ids`` holds everything after it
    in order; ``response_mask[i]`` is 1 where the policy sampled ``response_ids[i]`` and 0 where a tool,
    an interaction or the chat template supplied it; ``log_probs[i]`` is the engine's log-prob of a sampled
    token (0 elsewhere). ``num_turns`` counts user/tool and assistant turns (verl's ``__num_turns__``),
    ``reward_scores`` the step rewards of tools and interactions, ``metrics`` the loop's own counters.
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    num_turns: int = 1
    assistant_turns: int = 0
    reward_scores: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def context(self) -> list[int]:
        """The ids the next turn is generated from: the prompt and every response token so far."""
        return self.prompt_ids + self.response_ids

    def add_generated(self, token_ids: list[int], log_probs: list[float] | None) -> None:
        """Append tokens the policy sampled (mask 1) and their log-probs (0 when the engine gave none)."""
        self.response_ids.extend(token_ids)
        self.response_mask.extend([1] * len(token_ids))
        self.log_probs.extend(log_probs[: len(token_ids)] if log_probs else [0.0] * len(token_ids))
        self.assistant_turns += 1
        self.num_turns += 1

    def add_observation(self, token_ids: list[int]) -> None:
        """Append tokens the policy did not sample (tool or interaction turns, template delimiters): mask 0."""
        self.response_ids.extend(token_ids)
        self.response_mask.extend([0] * len(token_ids))
        self.log_probs.extend([0.0] * len(token_ids))
        self.num_turns += 1

    def count(self, key: str, value: float = 1.0) -> None:
        """Add ``value`` to the loop metric ``key``."""
        self.metrics[key] = self.metrics.get(key, 0.0) + value

    def finish(self, response_length: int) -> None:
        """Cut the response to ``response_length`` tokens and drop trailing tokens the policy did not sample:
        they carry no training signal, and the reward then sits on the last policy token."""
        del self.response_ids[response_length:], self.response_mask[response_length:], self.log_probs[response_length:]
        while self.response_mask and not self.response_mask[-1]:
            self.response_ids.pop()
            self.response_mask.pop()
            self.log_probs.pop()
