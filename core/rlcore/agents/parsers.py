"""Tool-call parsers (kind ``tool_parser``, chosen by ``actor_rollout_ref.rollout.multi_turn.format``).

A parser reads the text of one assistant turn and returns the tool calls in it. A call whose JSON is
malformed is returned as a :class:`ToolCall` with ``error`` set, so the loop can answer it with an error
message (the trajectory goes on and the metric ``tool/malformed`` counts it) instead of dropping it. The
Hermes parser (``hermes``) is rlcore-plugin-agents'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ToolCall"]


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: the tool's ``name`` and its ``arguments``; ``error`` says why the call is unusable."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
