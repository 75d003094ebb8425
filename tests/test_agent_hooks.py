"""The four multi-turn hooks: a component registered by a plugin is what a run's YAML or config reaches."""

from __future__ import annotations

import asyncio
import types
from pathlib import Path
from typing import Any

from rlcore_plugin_agents.interactions import load_interactions
from rlcore_plugin_agents.runner import AgentRunner
from rlcore_plugin_agents.tools import load_tools
from rlcore_testkit.tiny import build_tokenizer

import rlcore
from rlcore.agents import Interaction, InteractionTurn, Tool, ToolCall
from rlcore.config import load_config


def plugin(**hooks: Any) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{name: rlcore.hookimpl(fn) for name, fn in hooks.items()})


class Echo(Tool):
    default_schema = {"type": "function", "function": {"name": "echo", "parameters": {"type": "object"}}}

    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> str:
        return str(arguments.get("text", ""))


class AlwaysDone(Interaction):
    async def respond(self, instance_id: str, messages: list[dict[str, Any]]) -> InteractionTurn:
        return InteractionTurn("bye", reward=1.0, done=True)


class EveryLineIsACall:
    def parse(self, text: str) -> list[ToolCall]:
        return [ToolCall("echo", {"text": line}) for line in text.splitlines() if line]


class NeverGenerates:
    def __init__(self, context: Any) -> None:
        self.context = context


def test_hook_register_tools(registered, tmp_path: Path) -> None:
    def register_tools(register):
        register("echo-tool", Echo, aliases=("other_framework.tools.Echo",))

    path = tmp_path / "tools.yaml"
    path.write_text("tools:\n  - class_name: other_framework.tools.Echo\n    config: {timeout: 2}\n")
    with registered(plugin(register_tools=register_tools)) as manager:
        (tool,) = load_tools(str(path), manager.registry).values()
    assert isinstance(tool, Echo) and tool.config == {"timeout": 2}
    assert asyncio.run(tool.execute("t", {"text": "hi"})) == "hi"


def test_hook_register_interactions(registered, tmp_path: Path) -> None:
    def register_interactions(register):
        register("always-done", AlwaysDone)

    path = tmp_path / "interactions.yaml"
    path.write_text("interaction:\n  - name: user\n    class_name: always-done\n")
    with registered(plugin(register_interactions=register_interactions)) as manager:
        interactions = load_interactions(str(path), manager.registry)
    assert isinstance(interactions["user"], AlwaysDone) and interactions["user"].name == "user"


def test_hook_register_tool_parsers(registered) -> None:
    def register_tool_parsers(register):
        register("lines", EveryLineIsACall)

    cfg = load_config(overrides=["actor_rollout_ref.rollout.multi_turn.format=lines"])
    with registered(plugin(register_tool_parsers=register_tool_parsers)) as manager:
        runner = AgentRunner(cfg, build_tokenizer(), manager.registry)
    assert isinstance(runner.parser, EveryLineIsACall)


def test_hook_register_agent_loops(registered) -> None:
    def register_agent_loops(register):
        register("idle", NeverGenerates)

    cfg = load_config(overrides=["actor_rollout_ref.rollout.agent.default_agent_loop=idle"])
    with registered(plugin(register_agent_loops=register_agent_loops)) as manager:
        runner = AgentRunner(cfg, build_tokenizer(), manager.registry)
        assert manager.registry.load("agent_loop", "idle") is NeverGenerates
    assert runner.settings.default_agent_loop == "idle" and runner.settings.active
