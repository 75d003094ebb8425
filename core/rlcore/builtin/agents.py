"""Built-in multi-turn components: the ``single_turn`` and ``tool_agent`` loops, the Hermes tool-call parser,
the calculator and GSM8K tools and verl's GSM8K interaction (the code interpreter is rlcore-plugin-sandbox's). verl's class paths are
aliases, so verl's tool and interaction YAML files load unchanged."""

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
    """Register the built-in tools."""
    register("calculator", "rlcore.agents.builtin_tools:CalculatorTool", description="exact arithmetic")
    register(
        "gsm8k",
        "rlcore.agents.builtin_tools:Gsm8kTool",
        description="verl's GSM8K answer check (calc_gsm8k_reward)",
        aliases=("verl.tools.gsm8k_tool.Gsm8kTool",),
    )
    register(
        "geo3k",
        "rlcore.agents.builtin_tools:Geo3kTool",
        description="verl's Geometry3K answer check (calc_geo3k_reward)",
        aliases=("verl.tools.geo3k_tool.Geo3kTool",),
    )


@hookimpl
def register_interactions(register):
    """Register verl's GSM8K interaction."""
    register(
        "gsm8k",
        "rlcore.agents.interactions:Gsm8kInteraction",
        description="verl's GSM8K user: 'try again' until the answer is right",
        aliases=("verl.interactions.gsm8k_interaction.Gsm8kInteraction",),
    )
