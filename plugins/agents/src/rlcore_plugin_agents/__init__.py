"""rlcore plugin: multi-turn rollouts. :mod:`~rlcore_plugin_agents.runner` runs a rollout batch's agent loops
(batched engine turns, concurrent tools), :mod:`~rlcore_plugin_agents.loops` holds the ``single_turn`` and
``tool_agent`` loops, :mod:`~rlcore_plugin_agents.tools` the tool executor, :mod:`~rlcore_plugin_agents.tracing`
rollout tracing (``rollout.trace``), :mod:`~rlcore_plugin_agents.parsers` the Hermes tool-call parser and
:mod:`~rlcore_plugin_agents.builtin_tools` the calculator tool; :mod:`~rlcore_plugin_agents.multi_turn` is what
the core calls (:mod:`rlcore.api.multi_turn`)."""

__version__ = "0.1.0"
