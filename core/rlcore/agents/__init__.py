"""Multi-turn rollouts: agent loops, tools, interactions and tool-call parsers (``docs/multi-turn.md``).

The public names a plugin builds on: :class:`Tool` and :class:`ToolResult` (kind ``tool``),
:class:`Interaction` and :class:`InteractionTurn` (kind ``interaction``), :class:`AgentLoop`,
:class:`AgentContext`, :class:`AgentSample` and :class:`Trajectory` (kind ``agent_loop``), :class:`ToolCall`
and :class:`ToolParser` (kind ``tool_parser``), :func:`audit_batch`, the mask audit, and :class:`TrajectoryTrace`,
:class:`Span`, :class:`TraceSettings` and :func:`with_text` for rollout-trace backends
(``actor_rollout_ref.rollout.trace``). Importing this package imports no torch. The implementations (the
runner, the built-in loops, the tool executor, rollout tracing, the Hermes parser, the calculator tool) are
rlcore-plugin-agents', behind :mod:`rlcore.api.multi_turn`.
"""

from rlcore.agents.audit import MaskAuditError, audit_batch
from rlcore.agents.interactions import Interaction, InteractionTurn
from rlcore.agents.loops import AgentContext, AgentLoop, AgentSample, Generation
from rlcore.agents.parsers import ToolCall
from rlcore.agents.render import ChatRenderer
from rlcore.agents.tools import Tool, ToolResult
from rlcore.agents.tracing import Span, TraceSettings, TrajectoryTrace, with_text
from rlcore.agents.trajectory import Trajectory
from rlcore.api.components import ToolParser

__all__ = [
    "AgentContext",
    "AgentLoop",
    "AgentSample",
    "ChatRenderer",
    "Generation",
    "Interaction",
    "InteractionTurn",
    "MaskAuditError",
    "Span",
    "Tool",
    "ToolCall",
    "ToolParser",
    "ToolResult",
    "TraceSettings",
    "Trajectory",
    "TrajectoryTrace",
    "audit_batch",
    "with_text",
]
