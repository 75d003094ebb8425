"""The plugin's hooks: the run's multi-turn rollouts (``multi_turn``), the ``single_turn`` and ``tool_agent``
loops, the Hermes tool-call parser and the calculator tool (verl's GSM8K and Geometry3K tools and GSM8K
interaction are rlcore-plugin-tasks', the code interpreter is rlcore-plugin-sandbox's).

This module must stay free of torch imports: ``rlcore plugins`` and the command line import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlcore import hookimpl

if TYPE_CHECKING:
    from rlcore.api import MultiTurn, Registry

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def multi_turn(config: Any, registry: Registry) -> MultiTurn:
    """The run's :class:`~rlcore_plugin_agents.multi_turn.AgentRollouts` (every run: a sample may name an agent
    loop even with multi-turn off)."""
    from rlcore_plugin_agents.multi_turn import AgentRollouts

    return AgentRollouts(config, registry)


@hookimpl
def register_agent_loops(register: Any) -> None:
    """Register the single-turn and the tool-calling agent loops."""
    register(
        "single_turn",
        "rlcore_plugin_agents.loops:SingleTurnAgentLoop",
        description="one generation per prompt (the default)",
        aliases=("single_turn_agent",),
    )
    register(
        "tool_agent",
        "rlcore_plugin_agents.loops:ToolAgentLoop",
        description="tool calls and interactions until a turn makes none",
    )


@hookimpl
def register_tool_parsers(register: Any) -> None:
    """Register the Hermes tool-call format (also SGLang's ``qwen``/``qwen25`` names for it)."""
    register(
        "hermes",
        "rlcore_plugin_agents.parsers:HermesToolParser",
        description="<tool_call>{json}</tool_call> (Qwen, Hermes)",
        # SGLang's qwen/qwen25 detector reads the same <tool_call>\n{json}\n</tool_call> blocks
        aliases=("qwen", "qwen25"),
    )


@hookimpl
def register_tools(register: Any) -> None:
    """Register the built-in tools: the calculator and ``search`` (verl's ``SearchTool``)."""
    register("calculator", "rlcore_plugin_agents.builtin_tools:CalculatorTool", description="exact arithmetic")
    register(
        "search",
        "rlcore_plugin_agents.search_tool:SearchTool",
        description="documents from a retriever (kind retriever) for each query",
        aliases=("verl.tools.search_tool.SearchTool",),
    )


@hookimpl
def register_retrievers(register: Any) -> None:
    """Register the built-in retrievers of the ``search`` tool: ``http`` (verl's retrieval service) and ``bm25``."""
    register("http", "rlcore_plugin_agents.retrievers:HttpRetriever", description="verl's retrieval service over HTTP")
    register("bm25", "rlcore_plugin_agents.retrievers:BM25Retriever", description="BM25 over a local JSON-lines corpus")
