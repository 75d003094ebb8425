"""Agent loops (kind ``agent_loop``): turn one prompt into a :class:`~rlcore.agents.trajectory.Trajectory`.

A loop class is constructed once per rollout with the :class:`AgentContext` and its ``run(sample)`` coroutine
is awaited once per sample, concurrently with every other sample's. ``context.generate(token_ids)`` asks the
rollout engine for one assistant turn (the runner batches the turns of all waiting trajectories);
everything else a loop appends must be token ids too, rendered with ``context.renderer`` from the new
messages only. The built-in loops ``single_turn`` (one generation) and ``tool_agent`` (tool calls and
interactions until a turn makes none, the episode ends or a limit is reached) are rlcore-plugin-agents'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlcore.agents.interactions import Interaction
from rlcore.agents.parsers import ToolCall
from rlcore.agents.render import ChatRenderer
from rlcore.agents.settings import AgentSettings
from rlcore.agents.tracing import traced
from rlcore.api.components import AgentLoop, AgentSample, ToolParser, ToolResult

__all__ = ["AgentContext", "AgentLoop", "AgentSample", "Generation", "ToolCalls", "TurnGenerator"]


@dataclass
class Generation:
    """One assistant turn from the engine: its ``token_ids``, their ``log_probs`` (or None) and whether it
    ``finished`` with an end-of-sequence token (False: cut at the engine's ``response_length``)."""

    token_ids: list[int]
    log_probs: list[float] | None
    finished: bool


def _generation_outputs(turn: Generation) -> dict[str, Any]:
    return {"response_ids": turn.token_ids, "finished": turn.finished}


class TurnGenerator(Protocol):
    """The runner's turn batcher as an agent loop sees it."""

    async def generate(self, token_ids: list[int]) -> Generation:
        """Sample one assistant turn continuing ``token_ids``."""
        ...


class ToolCalls(Protocol):
    """The run's tools as an agent loop calls them (rlcore-plugin-agents' executor: bounded, timed, contained;
    a failure becomes an error message for the model and a metric in ``metrics``)."""

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI function schemas of the tools (the chat template's ``tools``)."""
        ...

    async def create(self, instance_id: str, tools_kwargs: Mapping[str, Any], metrics: dict[str, float]) -> None:
        """Start every tool's instance for one trajectory (``tools_kwargs``: the sample's per-tool kwargs)."""
        ...

    async def call(self, instance_id: str, call: ToolCall, metrics: dict[str, float]) -> ToolResult:
        """Run one parsed call of the trajectory ``instance_id``."""
        ...

    async def release(self, instance_id: str) -> None:
        """Release the trajectory's instances (also after failures)."""
        ...


@dataclass
class AgentContext:
    """What a loop may use: the tokenizer and renderer, the settings, the tools, the interactions and the
    tool-call parser; ``generate`` is the engine."""

    tokenizer: Any
    renderer: ChatRenderer
    settings: AgentSettings
    tools: ToolCalls
    parser: ToolParser
    generator: TurnGenerator
    interactions: dict[str, Interaction] = field(default_factory=dict)

    async def generate(self, token_ids: list[int]) -> Generation:
        """One assistant turn for the context ``token_ids`` (batched with other trajectories' turns)."""
        work = self.generator.generate(token_ids)
        return await traced("generate", "LLM", {"prompt_ids": token_ids}, work, _generation_outputs)
