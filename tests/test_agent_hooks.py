"""The five multi-turn hooks: a component registered by a plugin is what a run's YAML or config reaches, and a
plugin's ``multi_turn`` answer is what the run checks and rolls out through."""

from __future__ import annotations

import asyncio
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from rlcore_plugin_agents.interactions import load_interactions
from rlcore_plugin_agents.runner import AgentRunner
from rlcore_plugin_agents.tools import load_tools
from rlcore_testkit.tiny import build_tokenizer

import rlcore
from rlcore.agents import Interaction, InteractionTurn, Tool, ToolCall
from rlcore.config import load_config
from rlcore.errors import RLCoreError


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


class RecordingRollouts:
    """A plugin's multi-turn rollouts that record what the core asks of them and roll out on the engine."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def check(self) -> None:
        self.calls.append(("check",))

    def runner(self, tokenizer: Any) -> RecordingRollouts:
        self.calls.append(("runner", tokenizer is not None))
        return self

    def applies_to(self, batch: Any) -> bool:
        self.calls.append(("applies_to", len(batch)))
        return True

    def run(self, batch: Any, generate: Any) -> Any:
        self.calls.append(("run", len(batch)))
        return generate(batch)


@pytest.fixture
def without_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    """rlcore-plugin-agents disabled for the plugin manager the test builds (list this fixture first)."""
    monkeypatch.setenv("RLCORE_DISABLE_PLUGINS", "rlcore-plugin-agents")


def test_hook_multi_turn(without_agents: None, registered, tmp_path: Path, tiny_model_dir: Path) -> None:
    """A real run with a plugin's multi-turn rollouts: ``rlcore run`` checks them before anything starts, the
    trainer builds the runner once with the tokenizer and sends every rollout batch through it."""
    from rlcore_testkit.runs import make_tiny_task, tiny_run

    from rlcore.api import MultiTurn, MultiTurnRunner

    rollouts = RecordingRollouts()
    assert isinstance(rollouts, MultiTurn) and isinstance(rollouts, MultiTurnRunner)
    task = make_tiny_task(tmp_path / "task", train_rows=8, test_rows=2)
    with registered(plugin(multi_turn=lambda config, registry: rollouts), name="multi-turn-hook"):
        tiny_run(tmp_path, tiny_model_dir, task, "trainer.test_freq=-1")
    assert rollouts.calls[:2] == [("check",), ("runner", True)]
    validation, training = [("applies_to", 2), ("run", 2)], [("applies_to", 16), ("run", 16)]
    assert rollouts.calls[2:] == validation + training * 2, "the 2 test prompts, then two steps of 4 prompts × n=4"


def test_two_plugins_answering_the_multi_turn_hook_are_an_error(registered) -> None:
    """A run has one agent runner: a second answer (here beside rlcore-plugin-agents') is refused by name."""
    from rlcore.agents.seam import run_multi_turn

    cfg = load_config()
    with registered(plugin(multi_turn=lambda config, registry: RecordingRollouts()), name="second-runner") as manager:
        with pytest.raises(RLCoreError) as caught:
            run_multi_turn(cfg, manager.registry, manager)
    message = str(caught.value)
    assert "2 plugins answered the multi_turn hook" in message
    assert "rlcore-plugin-agents" in message and "second-runner" in message


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("actor_rollout_ref.rollout.multi_turn.enable=true", "actor_rollout_ref.rollout.multi_turn.enable=true"),
        (
            "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
            "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
        ),
    ],
)
def test_multi_turn_without_a_plugin_to_answer_names_the_agents_distribution(
    without_agents: None, plugin_manager: Any, override: str, key: str
) -> None:
    """With rlcore-plugin-agents disabled, a config that turns multi-turn on is refused naming the plugin; a
    single-turn config rolls out on the engine, and a batch whose samples name an agent loop is refused."""
    from rlcore.agents.seam import run_multi_turn
    from rlcore.api import Batch
    from rlcore.api.multi_turn import SingleTurn

    with pytest.raises(RLCoreError) as caught:
        run_multi_turn(load_config(overrides=[override]), plugin_manager.registry, plugin_manager)
    assert str(caught.value) == (
        f"{key}: multi-turn rollouts are provided by rlcore-plugin-agents, which is installed but did not load "
        "(disabled or failed: see `rlcore plugins`)"
    )
    single = run_multi_turn(load_config(), plugin_manager.registry, plugin_manager).runner(build_tokenizer())
    assert isinstance(single, SingleTurn)
    plain = Batch({"input_ids": torch.zeros((2, 3), dtype=torch.long)}, {"extra_info": np.array([{}, {}])}, {})
    assert single.applies_to(plain) is False
    named = Batch({"input_ids": torch.zeros((2, 3), dtype=torch.long)}, {"agent_name": np.array(["", "react"])}, {})
    with pytest.raises(RLCoreError, match=r"^samples name the agent loop\(s\) react: multi-turn rollouts are"):
        single.applies_to(named)
