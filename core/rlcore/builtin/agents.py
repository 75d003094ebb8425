"""Built-in multi-turn components: the ``single_turn`` and ``tool_agent`` loops, the Hermes tool-call parser and
the calculator tool (verl's GSM8K and Geometry3K tools and GSM8K interaction are rlcore-plugin-tasks', the code
interpreter is rlcore-plugin-sandbox's)."""

from rlcore.hookspecs import hookimpl


@hookimpl
def register_agent_loops(register):
    """Register the single-turn and the tool-calling agent loops."""
    register(
        "single_turn",
        "rlcore.agents.loops:SingleTurnAgentLoop",
        description="one generation per prompt (the default)",
        aliases=("single_turn_agent",),
    )
    register(
        "tool_agent",
        "rlcore.agents.loops:ToolAgentLoop",
        description="tool calls and interactions until a turn makes none",
    )


@hookimpl
def register_tool_parsers(register):
    """Register the Hermes tool-call format (also SGLang's ``qwen``/``qwen25`` names for it)."""
    register(
        "hermes",
        "rlcore.agents.parsers:HermesToolParser",
        description="<tool_call>{json}</tool_call> (Qwen, Hermes)",
        # SGLang's qwen/qwen25 detector reads the same <tool_call>\n{json}\n</tool_call> blocks
        aliases=("qwen", "qwen25"),
    )


@hookimpl
def register_tools(register):
    """Register the built-in calculator tool."""
    register("calculator", "rlcore.agents.builtin_tools:CalculatorTool", description="exact arithmetic")
