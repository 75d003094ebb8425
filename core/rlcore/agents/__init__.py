"""Multi-turn rollouts: agent loops, tools, interactions and tool-call parsers (``docs/multi-turn.md``).

The public names a plugin builds on: :class:`Tool` and :class:`ToolResult` (kind ``tool``),
:class:`Interaction` and :class:`InteractionTurn` (kind ``interaction``), :class:`AgentLoop`,
:class:`AgentContext`, :class:`AgentSample` and :class:`Trajectory` (kind ``agent_loop``), :class:`ToolCall`
and :class:`ToolParser` (kind ``tool_parser``), and :func:`audit_batch`, the mask audit. Importing this
package imports no torch; the runner (:mod:`rlcore.agents.runner`) does.
"""

from rlcore.agents.audit import MaskAuditError, audit_batch
from rlcore.agents.interactions import Interaction, InteractionTurn
from rlcore.agents.loops import AgentContext, AgentLoop, AgentSample, Generation
from rlcore.agents.parsers import ToolCall, ToolParser
from rlcore.agents.render import ChatRenderer
from rlcore.agents.tools import Tool, ToolResult
from rlcore.agents.trajectory import Trajectory

__all__ = [
    "AgentContext",
    "AgentLoop",
    "AgentSample",
    "ChatRenderer",
    "Generation",
    "Interaction",
    "InteractionTurn",
    "MaskAuditError",
    "Tool",
    "ToolCall",
    "ToolParser",
    "ToolResult",
    "Trajectory",
    "audit_batch",
]
