"""The run's multi-turn rollouts: the plugins' answer to the ``multi_turn`` hook (:mod:`rlcore.api.multi_turn`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlcore.agents.settings import MULTI_TURN_KEY, AgentSettings
from rlcore.api.multi_turn import MultiTurn, SingleTurn
from rlcore.config.keys import ROLLOUT_KEY
from rlcore.config.sections.rollout import RolloutConfig
from rlcore.distributions import by_name
from rlcore.errors import RLCoreError

if TYPE_CHECKING:
    from rlcore.plugins import PluginManager
    from rlcore.registry import Registry

__all__ = ["AGENTS_DISTRIBUTION", "run_multi_turn"]

#: the first-party distribution that answers the ``multi_turn`` hook
AGENTS_DISTRIBUTION = "rlcore-plugin-agents"


def run_multi_turn(config: Any, registry: Registry, manager: PluginManager) -> MultiTurn:
    """The run's :class:`rlcore.api.multi_turn.MultiTurn`: the answer of ``manager``'s plugins to the
    ``multi_turn`` hook (``registry``: the run's), or :class:`~rlcore.api.multi_turn.SingleTurn` when none
    answers. A config that turns multi-turn on with no plugin to answer is an error naming
    ``rlcore-plugin-agents``, and so are two answers (naming the plugins that implement the hook)."""
    hook = manager.hook.multi_turn
    answers = [answer for answer in hook(config=config, registry=registry) if answer is not None]
    if len(answers) > 1:
        offering = ", ".join(sorted({impl.plugin_name for impl in hook.get_hookimpls()}))
        raise RLCoreError(
            f"{MULTI_TURN_KEY}: {len(answers)} plugins answered the multi_turn hook (of {offering}); a run has one "
            "agent runner: disable the others (RLCORE_DISABLE_PLUGINS)"
        )
    if answers:
        return answers[0]
    dist = by_name(AGENTS_DISTRIBUTION)
    assert dist is not None, f"distributions.DISTRIBUTIONS lists {AGENTS_DISTRIBUTION}"
    missing = f"multi-turn rollouts are provided by {dist.name}, which {dist.absence}"
    settings = AgentSettings.from_rollout(RolloutConfig.from_tree(config))
    if settings.enable:
        raise RLCoreError(f"{MULTI_TURN_KEY}.enable=true: {missing}")
    if settings.active:
        raise RLCoreError(f"{ROLLOUT_KEY}.agent.default_agent_loop={settings.default_agent_loop}: {missing}")
    return SingleTurn(missing)
