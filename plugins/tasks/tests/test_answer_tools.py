"""verl's GSM8K and Geometry3K answer-check tools and GSM8K interaction (rlcore-plugin-tasks): verl's YAML files
load them by verl's class paths, they grade answers like the scorers, and they pass the tool and interaction
contracts."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rlcore_plugin_agents.tools import load_tools
from rlcore_plugin_tasks.answer_tools import Geo3kTool, Gsm8kTool
from rlcore_testkit.contracts import InteractionContract, ToolContract

from rlcore.api import ToolResult
from rlcore.plugins import load_plugins

#: verl's GSM8K tool config, as verl ships it (vendored in the repository's tests/verl_examples)
VERL_TOOL_YAML = (
    Path(__file__).resolve().parents[3]
    / "tests/verl_examples/examples/sglang_multiturn/config/tool_config/gsm8k_tool_config.yaml"
)


def test_verl_gsm8k_tool_yaml_loads_unchanged_and_rewards_the_right_answer() -> None:
    tools = load_tools(str(VERL_TOOL_YAML), load_plugins().registry)
    (tool,) = tools.values()
    assert isinstance(tool, Gsm8kTool) and tool.name == "calc_gsm8k_reward"
    assert tool.openai_schema()["function"]["parameters"]["required"] == ["answer"]

    async def episode(answer: str) -> ToolResult:
        await tool.create("e", ground_truth="72")
        result = await tool.execute("e", {"answer": answer})
        await tool.release("e")
        return result if isinstance(result, ToolResult) else ToolResult(result)

    assert asyncio.run(episode("The answer is 72")).reward == 1.0
    assert asyncio.run(episode("71")).reward == 0.0


def test_verl_geo3k_tool_class_name_loads_and_grades_like_the_geo3k_scorer(tmp_path: Path) -> None:
    """verl's ``verl.tools.geo3k_tool.Geo3kTool`` (0.9's geo3k multi-turn tool config) maps onto this plugin's."""
    path = tmp_path / "geo3k_tool_config.yaml"
    path.write_text('tools:\n  - class_name: "verl.tools.geo3k_tool.Geo3kTool"\n    config: {type: native}\n')
    (tool,) = load_tools(str(path), load_plugins().registry).values()
    assert isinstance(tool, Geo3kTool) and tool.name == "calc_geo3k_reward"

    async def episode(answer: str, truth: str) -> float:
        await tool.create("e", ground_truth=truth)
        result = await tool.execute("e", {"answer": answer})
        await tool.release("e")
        return (result if isinstance(result, ToolResult) else ToolResult(result)).reward

    assert asyncio.run(episode("\\frac{3}{4}", "\\frac{3}{4}")) == 1.0
    assert asyncio.run(episode("\\boxed{\\frac{3}{4}}", "\\frac{3}{4}")) == 1.0
    assert asyncio.run(episode("12", "13")) == 0.0
    assert asyncio.run(episode("", "13")) == 0.0


class TestGsm8kToolContract(ToolContract):
    component_name = "verl.tools.gsm8k_tool.Gsm8kTool"
    example_arguments = {"answer": "72"}
    create_kwargs = {"ground_truth": "72"}


class TestGeo3kToolContract(ToolContract):
    component_name = "verl.tools.geo3k_tool.Geo3kTool"
    example_arguments = {"answer": "24"}
    create_kwargs = {"ground_truth": "24"}


class TestGsm8kInteractionContract(InteractionContract):
    component_name = "gsm8k"
    interaction_kwargs = {"ground_truth": "3"}
