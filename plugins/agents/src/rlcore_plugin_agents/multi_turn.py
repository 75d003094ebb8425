"""The plugin's answer to the core's multi-turn seam (:class:`rlcore.api.MultiTurn`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlcore.api import Registry
    from rlcore_plugin_agents.runner import AgentRunner

__all__ = ["AgentRollouts"]


class AgentRollouts:
    """A run's agent rollouts: the dry run's check of the multi-turn settings and the trainer's runner.

    Args:
        config: the resolved run config.
        registry: the run's registry (agent loops, tools, interactions, tool parser, trace backend).
    """

    def __init__(self, config: Any, registry: Registry) -> None:
        self.config = config
        self.registry = registry

    def check(self) -> None:
        """:func:`~rlcore_plugin_agents.checks.check_agent_config` of the run's config."""
        from rlcore_plugin_agents.checks import check_agent_config

        check_agent_config(self.config, self.registry)

    def runner(self, tokenizer: Any) -> AgentRunner:
        """The run's :class:`~rlcore_plugin_agents.runner.AgentRunner` (imports torch)."""
        from rlcore_plugin_agents.runner import AgentRunner

        return AgentRunner(self.config, tokenizer, self.registry)
