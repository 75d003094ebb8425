"""``router_replay`` (verl's keys): whether the training forward of a mixture-of-experts model replays the
routing recorded earlier, and the checks of those keys before a run starts.

- ``R2``: the actor's log-prob pass records each token's experts; the update replays them.
- ``R3``: the rollout records them (``actor_rollout_ref.rollout.enable_rollout_routing_replay``); the
  actor's log-prob pass and the update replay them.

As in verl, the reference model's pass never replays (verl's ``compute_ref_log_prob`` runs with routing
replay off). This module reads configs only (no torch): it runs in the dry run, on the typed sections.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from rlcore.config.sections.actor import RouterReplayConfig

if TYPE_CHECKING:
    from rlcore.config.schema import ActorRolloutRefConfig

#: the values of ``router_replay.mode``
REPLAY_MODES: tuple[str, ...] = ("disabled", "R2", "R3")
#: the actor's section, whose ``router_replay.mode`` a training engine reads
ACTOR = "actor_rollout_ref.actor"
REF = "actor_rollout_ref.ref"
#: the rollout's switch that records routing (R3 needs it)
ROUTING_REPLAY_KEY = "actor_rollout_ref.rollout.enable_rollout_routing_replay"
#: model config fields that give a mixture-of-experts model's number of routed experts
EXPERT_COUNT_FIELDS: tuple[str, ...] = ("num_experts", "num_local_experts", "n_routed_experts")


def replay_mode(config: DictConfig, section: str) -> str:
    """``{section}.router_replay.mode``, read from the typed ``router_replay`` section of ``config``; a section
    without one (a plugin's trained model, such as PRIME's reward model) has the default, ``disabled``."""
    if OmegaConf.select(config, f"{section}.router_replay", default=None) is None:
        return RouterReplayConfig().mode
    return str(RouterReplayConfig.from_tree(config, f"{section}.router_replay").mode)


def is_moe_fields(fields: Mapping[str, Any]) -> bool:
    """Whether a model config's fields (``config.json``, or a transformers config's ``to_dict()``; a
    multimodal model's ``text_config``) describe a mixture of experts: a positive expert count and
    ``num_experts_per_tok``."""
    text = fields.get("text_config") or fields
    return any(text.get(name) for name in EXPERT_COUNT_FIELDS) and bool(text.get("num_experts_per_tok"))


def _local_model_type(path: Any) -> tuple[str, bool] | None:
    """``(model_type, is a mixture of experts)`` of a local model folder's ``config.json``; None when the
    path is not a local folder with a readable one (a hub name: the engine checks when it loads)."""
    config = Path(str(path)) / "config.json" if path else None
    if config is None or not config.is_file():
        return None
    try:
        fields = json.loads(config.read_text())
    except (OSError, ValueError):
        return None  # the model-path check reports a broken config.json
    return (str(fields.get("model_type")), is_moe_fields(fields)) if isinstance(fields, dict) else None


def router_replay_problems(policy: ActorRolloutRefConfig) -> list[str]:
    """What is wrong with the ``router_replay`` keys of the actor and the reference, each naming the key: an
    unknown mode, a record or replay file (verl declares them and reads neither), a reference that replays,
    R3 without the rollout recording the routing, R2 with it (verl refuses the pair too), and replay on a model
    that is not a mixture of experts."""
    problems: list[str] = []
    for section, replay in ((ACTOR, policy.actor.router_replay), (REF, policy.ref.router_replay)):
        mode = str(replay.mode)
        if mode not in REPLAY_MODES:
            problems.append(f"{section}.router_replay.mode={mode!r} is not a mode: choose {', '.join(REPLAY_MODES)}")
        for name in ("record_file", "replay_file"):
            if getattr(replay, name) is not None:
                problems.append(
                    f"{section}.router_replay.{name} is not supported: verl declares it but reads it nowhere; routing "
                    "is recorded and replayed in memory (router_replay.mode), leave it null"
                )
    ref_mode = str(policy.ref.router_replay.mode)
    if ref_mode in ("R2", "R3"):
        problems.append(
            f"{REF}.router_replay.mode={ref_mode} is not supported: the reference model's pass never "
            f"replays routing (as in verl); set {ACTOR}.router_replay.mode instead"
        )
    mode = str(policy.actor.router_replay.mode)
    records = bool(policy.rollout.enable_rollout_routing_replay)
    if mode == "R3" and not records:
        problems.append(
            f"{ACTOR}.router_replay.mode=R3 replays the rollout's routing: set {ROUTING_REPLAY_KEY}=true so that the "
            "rollout records it (or use mode=R2, which records it in the actor's log-prob pass)"
        )
    if mode == "R2" and records:
        problems.append(
            f"{ACTOR}.router_replay.mode=R2 records the routing in the actor's log-prob pass, while {ROUTING_REPLAY_KEY}=true "
            "records it in the rollout (R3): choose one (verl refuses the pair too)"
        )
    if mode in ("R2", "R3"):
        path = policy.model.path
        local = _local_model_type(path)
        if local is not None and not local[1]:
            problems.append(
                f"{ACTOR}.router_replay.mode={mode} needs a mixture-of-experts model, but "
                f"actor_rollout_ref.model.path={path} is a dense {local[0]!r} model; set the mode to disabled"
            )
    return problems
