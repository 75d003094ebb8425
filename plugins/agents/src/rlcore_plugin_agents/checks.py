"""The dry run's multi-turn check: every name resolves and the tool and interaction files load."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlcore.api import MULTI_TURN_KEY, ROLLOUT_KEY, AgentSettings, RLCoreError, RolloutConfig
from rlcore_plugin_agents.interactions import load_interactions
from rlcore_plugin_agents.tools import load_tools
from rlcore_plugin_agents.tracing import check_trace_config

if TYPE_CHECKING:
    from rlcore.api import Registry

__all__ = ["check_agent_config"]


def check_agent_config(config: Any, registry: Registry) -> None:
    """What the dry run checks before anything starts: the multi-turn values, the default agent loop and the
    tool-call format are registered in ``registry``, the tool and interaction YAML files load (their classes
    resolve) and the rollout trace backend (``rollout.trace``) is available."""
    settings = AgentSettings.from_rollout(RolloutConfig.from_tree(config))
    for kind, name, key in (
        ("agent_loop", settings.default_agent_loop, f"{ROLLOUT_KEY}.agent.default_agent_loop"),
        ("tool_parser", settings.format, f"{MULTI_TURN_KEY}.format"),
    ):
        try:
            registry.get(kind, name)
        except RLCoreError as exc:
            raise RLCoreError(f"{key}={name}: {exc}") from exc
    if settings.tool_config_path:
        load_tools(settings.tool_config_path, registry)
    if settings.interaction_config_path:
        load_interactions(settings.interaction_config_path, registry)
    check_trace_config(config, registry)
