"""The built-in agent loops (kind ``agent_loop``): ``single_turn`` (one generation per prompt, rlcore's
behaviour without multi-turn) and ``tool_agent`` (tool calls and interactions until a turn makes none, the
episode ends or a limit is reached). The contract a loop builds on (:class:`~rlcore.api.AgentContext`,
:class:`~rlcore.api.AgentSample`, :class:`~rlcore.api.Trajectory`) is the core's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import asdict
from typing import Any

from rlcore.api import (
    AgentContext,
    AgentSample,
    Interaction,
    RLCoreError,
    ToolCall,
    ToolResult,
    Trajectory,
    traced,
)

log = logging.getLogger(__name__)

__all__ = ["SingleTurnAgentLoop", "ToolAgentLoop"]


def _fields(result: Any) -> dict[str, Any]:
    """A tool result's or interaction reply's fields, as a span's outputs."""
    return asdict(result)


class SingleTurnAgentLoop:
    """One generation per prompt, from the dataset's prompt ids: rlcore's behaviour without multi-turn."""

    def __init__(self, context: AgentContext) -> None:
        self.context = context

    async def run(self, sample: AgentSample) -> Trajectory:
        """Generate once and return the trajectory."""
        trajectory = Trajectory(list(sample.prompt_ids))
        turn = await self.context.generate(trajectory.context)
        trajectory.add_generated(turn.token_ids[: self.context.settings.response_length], turn.log_probs)
        return trajectory


class ToolAgentLoop:
    """verl's tool agent: generate; run the turn's tool calls (or, without calls, let the sample's interaction
    reply); append the replies rendered through the chat template; repeat.

    Stops when a turn has neither tool calls nor an interaction reply, the interaction ends the episode, a
    turn is cut by the engine's length, the response budget (``rollout.response_length`` tokens) is spent or
    ``max_assistant_turns`` / ``max_user_turns`` (tool and interaction replies both count) is reached.
    The prompt is re-rendered from ``raw_prompt`` with the tool schemas when there are tools.
    """

    def __init__(self, context: AgentContext) -> None:
        self.context = context

    def _prompt_ids(self, sample: AgentSample) -> list[int]:
        schemas = self.context.tools.schemas()
        if sample.messages and schemas:
            return self.context.renderer.prompt_ids(sample.messages, tools=schemas)
        return list(sample.prompt_ids)

    def _interaction(self, sample: AgentSample) -> tuple[Interaction | None, dict[str, Any]]:
        interactions = self.context.interactions
        kwargs = dict(sample.extra_info.get("interaction_kwargs") or {})
        if not interactions:
            return None, kwargs
        name = kwargs.get("name")
        if name is None and len(interactions) == 1:
            return next(iter(interactions.values())), kwargs
        if name not in interactions:
            raise RLCoreError(
                f"extra_info.interaction_kwargs.name={name!r} of sample {sample.instance_id} is not one of the "
                f"configured interactions ({', '.join(sorted(interactions))})"
            )
        return interactions[name], kwargs

    async def run(self, sample: AgentSample) -> Trajectory:
        """Run the conversation to its end; tool and interaction instances are always released."""
        ctx, settings = self.context, self.context.settings
        trajectory = Trajectory(self._prompt_ids(sample))
        messages = list(sample.messages or [])
        interaction, interaction_kwargs = self._interaction(sample)
        iid = sample.instance_id
        await ctx.tools.create(iid, sample.extra_info.get("tools_kwargs") or {}, trajectory.metrics)
        if interaction is not None:
            await interaction.start(iid, **interaction_kwargs)
        user_turns = 0
        try:
            while True:
                budget = settings.response_length - len(trajectory.response_ids)
                turn = await ctx.generate(trajectory.context)
                tokens = turn.token_ids[:budget]
                trajectory.add_generated(tokens, turn.log_probs)
                if len(tokens) < len(turn.token_ids) or not turn.finished:
                    break
                text = ctx.tokenizer.decode(tokens, skip_special_tokens=True)
                messages.append({"role": "assistant", "content": text})
                if settings.max_assistant_turns and trajectory.assistant_turns >= settings.max_assistant_turns:
                    break
                if settings.max_user_turns and user_turns >= settings.max_user_turns:
                    break
                new = await self._replies(iid, text, messages, interaction, trajectory)
                if not new:
                    break
                user_turns += 1
                messages.extend(new)
                trajectory.add_observation(ctx.renderer.continuation_ids(new))
                if len(trajectory.response_ids) >= settings.response_length or trajectory.extra.get("done"):
                    break
        finally:
            await ctx.tools.release(iid)
            if interaction is not None:
                await interaction.finish(iid)
        return trajectory

    def _call_tool(self, iid: str, call: ToolCall, trajectory: Trajectory) -> Awaitable[ToolResult]:
        """One tool call; a ``tool:<name>`` span when the trajectory is traced."""
        inputs = {"name": call.name, "arguments": call.arguments, "parse_error": call.error}
        work = self.context.tools.call(iid, call, trajectory.metrics)
        return traced(f"tool:{call.name}", "TOOL", inputs, work, _fields)

    async def _replies(
        self,
        iid: str,
        text: str,
        messages: list[dict[str, Any]],
        interaction: Interaction | None,
        trajectory: Trajectory,
    ) -> list[dict[str, Any]]:
        """The messages answering an assistant turn: tool responses, an interaction reply, or none."""
        calls = self.context.parser.parse(text)
        if calls:
            trajectory.count("tool/turns_with_calls")
            results = await asyncio.gather(*(self._call_tool(iid, c, trajectory) for c in calls))
            for result in results:
                if result.reward is not None:
                    trajectory.reward_scores["tool_rewards"] = (
                        trajectory.reward_scores.get("tool_rewards", 0.0) + result.reward
                    )
            return [{"role": "tool", "content": result.text} for result in results]
        if interaction is None:
            return []
        try:
            work = interaction.respond(iid, messages)
            reply = await traced("interaction", "AGENT", {"name": interaction.name}, work, _fields)
        except Exception as exc:  # noqa: BLE001 - a failing user simulator ends the episode, not the run
            log.warning("interaction %r failed in %s: %s: %s", interaction.name, iid, type(exc).__name__, exc)
            trajectory.count("interaction/errors")
            return []
        trajectory.count("interaction/turns")
        if reply.reward is not None:
            trajectory.extra.setdefault("turn_scores", []).append(float(reply.reward))
        if reply.done:
            trajectory.extra["done"] = True
            return []
        return [{"role": "user", "content": reply.text}]
