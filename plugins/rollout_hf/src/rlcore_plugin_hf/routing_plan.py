"""The run plan's line for recording a mixture-of-experts model's routing during rollout (R3), and its checks.

``actor_rollout_ref.rollout.enable_rollout_routing_replay=true`` asks the rollout engine to return the
experts it routed every token to (:mod:`rlcore_plugin_hf.routing`; the ``vllm`` engine records them in its
worker, ``rlcore_plugin_vllm.routing``). Before anything loads, the dry run checks what it can: the engine is
one of :data:`RECORDING_ENGINES`, no agent loops drive it, and a local policy is a mixture-of-experts model
(its ``config.json``). Imports no torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlcore.api import ROLLOUT_KEY, AgentSettings, ConfigError, RLCoreError, RolloutConfig

__all__ = ["describe_routing_replay", "moe_shape"]

#: the config key, as messages name it
REPLAY_KEY = f"{ROLLOUT_KEY}.enable_rollout_routing_replay"
#: the rollout engines that record the routing, and what the plan says each does besides
RECORDING_ENGINES = {
    "hf": "",
    "vllm": " (vLLM eager, prefix caching off: every prompt token runs through the routers' capture callbacks)",
}
#: the ``config.json`` keys that count a model's routed experts, by family (Qwen-MoE, Mixtral, DeepSeek)
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def moe_shape(model_path: str) -> tuple[str, int, int] | None:
    """``(model_type, routed experts, experts per token)`` from a local model folder's ``config.json`` (a
    vision-language model's ``text_config`` included; 0 experts for a dense model), or None when the path is
    not a local folder with a readable config."""
    path = Path(model_path).expanduser() / "config.json"
    try:
        parsed = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(parsed, dict):
        return None
    sections = [parsed, parsed.get("text_config") or {}]
    experts = max((int(section.get(key) or 0) for section in sections for key in EXPERT_COUNT_KEYS), default=0)
    top_k = max(int(section.get("num_experts_per_tok") or 0) for section in sections)
    return str(parsed.get("model_type", "unknown")), experts, top_k


def _agent_loops(config: Any) -> bool:
    """Whether the run ``config``'s rollouts go through agent loops (an invalid agent setting is reported by its
    own check)."""
    try:
        return AgentSettings.from_rollout(RolloutConfig.from_tree(config)).active
    except RLCoreError:
        return False


def describe_routing_replay(config: Any) -> str | None:
    """The plan's line for R3 recording (None when it is off).

    Raises:
        ConfigError: an engine that does not record (naming ``rollout.name``), agent loops, or a dense
            policy (naming its ``model_type``), each with what to use instead.
    """
    rollout = config.actor_rollout_ref.rollout
    if not rollout.enable_rollout_routing_replay:
        return None
    name = rollout.name
    if name not in RECORDING_ENGINES:
        raise ConfigError(
            f"{REPLAY_KEY}=true needs the routing each token took during rollout, but {ROLLOUT_KEY}.name={name}: "
            f"this engine does not return it; use {ROLLOUT_KEY}.name=hf or vllm, or record the routing in the "
            "actor's log-prob pass (actor_rollout_ref.actor.router_replay.mode=R2)"
        )
    if _agent_loops(config):
        raise ConfigError(
            f"{REPLAY_KEY}=true with agent loops ({ROLLOUT_KEY}.multi_turn.enable=true or {ROLLOUT_KEY}.agent."
            "default_agent_loop): the agent loops assemble each trajectory from several engine calls and do not "
            "carry the recorded routing into it yet; turn one of them off "
            "(actor_rollout_ref.actor.router_replay.mode=R2 records the routing in the actor instead)"
        )
    model_path = str(config.actor_rollout_ref.model.path or "")
    shape = moe_shape(model_path)
    if shape is None:
        return (
            f"rollout routing (R3, {name} engine): recorded for every token{RECORDING_ENGINES[name]}; {model_path} is "
            "checked when it loads"
        )
    model_type, experts, top_k = shape
    if experts <= 0:
        raise ConfigError(
            f"{REPLAY_KEY}=true records the routing of a mixture-of-experts model, but actor_rollout_ref.model.path="
            f"{model_path} is a dense model (model_type {model_type!r}); set it to false"
        )
    return (
        f"rollout routing (R3, {name} engine): each token's top-{top_k} of {experts} experts in every sparse layer "
        f"of {model_type} recorded as routed_experts [batch, prompt + response, layers, {top_k}]{RECORDING_ENGINES[name]}"
    )
