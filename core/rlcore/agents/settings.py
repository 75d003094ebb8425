"""The multi-turn settings of a run, read and checked from ``actor_rollout_ref.rollout.{multi_turn,agent}``."""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.config.keys import ROLLOUT_KEY
from rlcore.config.sections.rollout import MultiTurnConfig, RolloutConfig
from rlcore.errors import RLCoreError

__all__ = ["MULTI_TURN_KEY", "TRUNCATE_SIDES", "AgentSettings"]

#: the multi-turn section of the rollout config
MULTI_TURN_KEY = f"{ROLLOUT_KEY}.multi_turn"
#: where a tool or interaction response longer than ``max_tool_response_length`` characters is cut
TRUNCATE_SIDES = ("left", "right", "middle")


def _count(section: MultiTurnConfig, key: str, prefix: str, *, allow_none: bool) -> int | None:
    """``section.<key>`` as a positive integer (or None when allowed), else an error naming the key."""
    value = getattr(section, key)
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        allowed = "a positive integer or null" if allow_none else "a positive integer"
        raise RLCoreError(f"{prefix}.{key} must be {allowed}, got {value!r}")
    return value


@dataclass(frozen=True)
class AgentSettings:
    """Everything the agent loops read from the config (verl's key names).

    ``enable`` is ``multi_turn.enable``; ``default_agent_loop`` is ``agent.default_agent_loop``, or when that is
    null ``tool_agent`` with multi-turn enabled and ``single_turn`` without. ``response_length`` is the
    trajectory's whole budget of response tokens (policy, tool and interaction tokens together).
    ``over_sample_rate`` is ``rollout.over_sample_rate``: a training rollout stops once ``int(size × (1 − rate))``
    trajectories have finished and aborts the rest (verl's early termination).
    """

    enable: bool
    default_agent_loop: str
    max_assistant_turns: int | None
    max_user_turns: int | None
    max_parallel_calls: int
    max_tool_response_length: int
    tool_response_truncate_side: str
    tool_config_path: str | None
    interaction_config_path: str | None
    format: str
    response_length: int
    over_sample_rate: float = 0.0

    @classmethod
    def from_rollout(cls, rollout: RolloutConfig) -> AgentSettings:
        """Read the typed ``actor_rollout_ref.rollout`` section; invalid values raise :class:`RLCoreError` naming
        the key."""
        multi = rollout.multi_turn
        enable = multi.enable
        if not isinstance(enable, bool):
            raise RLCoreError(f"{MULTI_TURN_KEY}.enable must be true or false, got {enable!r}")
        side = multi.tool_response_truncate_side
        if side not in TRUNCATE_SIDES:
            raise RLCoreError(
                f"{MULTI_TURN_KEY}.tool_response_truncate_side must be one of {', '.join(TRUNCATE_SIDES)}, got {side!r}"
            )
        default = rollout.agent.default_agent_loop or ("tool_agent" if enable else "single_turn")
        response_length = rollout.response_length
        over_sample_rate = rollout.over_sample_rate
        if isinstance(over_sample_rate, bool) or not isinstance(over_sample_rate, (int, float)):
            raise RLCoreError(f"{ROLLOUT_KEY}.over_sample_rate must be a number in [0, 1), got {over_sample_rate!r}")
        if not 0 <= over_sample_rate < 1:
            raise RLCoreError(f"{ROLLOUT_KEY}.over_sample_rate must be in [0, 1), got {over_sample_rate!r}")
        return cls(
            enable=enable,
            default_agent_loop=str(default),
            max_assistant_turns=_count(multi, "max_assistant_turns", MULTI_TURN_KEY, allow_none=True),
            max_user_turns=_count(multi, "max_user_turns", MULTI_TURN_KEY, allow_none=True),
            max_parallel_calls=_count(multi, "max_parallel_calls", MULTI_TURN_KEY, allow_none=False) or 1,
            max_tool_response_length=_count(multi, "max_tool_response_length", MULTI_TURN_KEY, allow_none=False) or 1,
            tool_response_truncate_side=str(side),
            tool_config_path=multi.tool_config_path or None,
            interaction_config_path=multi.interaction_config_path or None,
            format=str(multi.format or MultiTurnConfig.format),
            response_length=int(response_length),
            over_sample_rate=float(over_sample_rate),
        )

    @property
    def active(self) -> bool:
        """Whether rollouts go through agent loops at all (otherwise the engine is called as before)."""
        return self.enable or self.default_agent_loop not in ("single_turn", "single_turn_agent")
