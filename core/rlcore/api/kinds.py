"""The component kinds: the one table every other list of kinds derives from or is checked against.

:data:`rlcore.registry.KIND_HOOKS` and the ``rlcore plugins --kind`` choices are built from
:data:`COMPONENT_KINDS`; :mod:`rlcore.distributions` refuses a row naming a kind that is not here. The
places that cannot import this module are checked against it by ``tests/test_kinds.py``: the
``register_<kind>s`` hooks of :mod:`rlcore.hookspecs`, the plugin template's ``cookiecutter.json``, the kinds
table of ``docs/architecture.md`` and the template variables of ``docs/publishing.md``. Adding a kind here
alone, or anywhere else alone, fails that test.

Each kind names the protocol its targets implement (:mod:`rlcore.api.components`, :mod:`rlcore.api.training`,
:mod:`rlcore.api.rollout`) and, when it has capabilities, its spec class (:mod:`rlcore.api.specs`).

Nothing here imports anything but the standard library and those stdlib-only modules: the plugin loader and
the CLI import it at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlcore.api import components
from rlcore.api.rollout import RolloutEngine
from rlcore.api.specs import AdvantageEstimatorSpec, PresetSpec, RewardScorerSpec, TrainingBackendSpec
from rlcore.api.training import TrainingBackend
from rlcore.api.transport import WeightTransport


@dataclass(frozen=True)
class KindSpec:
    """One component kind: its name, the hook that registers it, what selects a component of it, the protocol
    its targets implement and the spec class of its capabilities."""

    #: the kind's name, as in ``rlcore plugins --kind NAME`` and ``get_component(NAME, ...)``
    name: str
    #: the hookspec a plugin implements to register components of this kind
    hook: str
    #: the config key or mechanism that picks a component (the "selected by" column of docs/architecture.md)
    selected_by: str
    #: the protocol a target implements (a class kind: its instances'; the registry returns the class)
    protocol: type[Any]
    #: the frozen dataclass a component declares its capabilities with (``register(..., spec=...)``); None
    #: for a kind without capabilities, which takes no spec
    spec: type[Any] | None = None


#: every component kind, in the order the registry calls their registration hooks
COMPONENT_KINDS: tuple[KindSpec, ...] = (
    KindSpec(
        "training_backend",
        "register_training_backends",
        "actor_rollout_ref.actor.strategy, critic.strategy",
        TrainingBackend,
        TrainingBackendSpec,
    ),
    KindSpec("rollout_engine", "register_rollout_engines", "actor_rollout_ref.rollout.name", RolloutEngine),
    KindSpec("reward_manager", "register_reward_managers", "reward_model.reward_manager", components.RewardManager),
    KindSpec(
        "reward_scorer", "register_reward_scorers", "sample's data_source", components.RewardScorer, RewardScorerSpec
    ),
    KindSpec("dataset", "register_datasets", "data.dataset", components.Dataset),
    KindSpec(
        "advantage_estimator",
        "register_advantage_estimators",
        "algorithm.adv_estimator",
        components.AdvantageEstimator,
        AdvantageEstimatorSpec,
    ),
    KindSpec(
        "policy_loss", "register_policy_losses", "actor_rollout_ref.actor.policy_loss.loss_mode", components.PolicyLoss
    ),
    KindSpec("batch_filter", "register_batch_filters", "algorithm.batch_filters", components.BatchFilter),
    KindSpec("tracker", "register_trackers", "trainer.logger", components.Tracker),
    KindSpec("preset", "register_presets", "rlcore run --preset NAME", components.Preset, PresetSpec),
    KindSpec(
        "tool",
        "register_tools",
        "class_name in the tool YAML (actor_rollout_ref.rollout.multi_turn.tool_config_path)",
        components.Tool,
    ),
    KindSpec(
        "agent_loop",
        "register_agent_loops",
        "sample's agent_name, actor_rollout_ref.rollout.agent.default_agent_loop",
        components.AgentLoop,
    ),
    KindSpec(
        "interaction",
        "register_interactions",
        "class_name in the interaction YAML (multi_turn.interaction_config_path)",
        components.Interaction,
    ),
    KindSpec(
        "tool_parser", "register_tool_parsers", "actor_rollout_ref.rollout.multi_turn.format", components.ToolParser
    ),
    KindSpec(
        "weight_transport",
        "register_weight_transports",
        "actor_rollout_ref.rollout.checkpoint_engine.backend",
        WeightTransport,
    ),
)
#: the kinds' names, in :data:`COMPONENT_KINDS` order
KINDS: tuple[str, ...] = tuple(spec.name for spec in COMPONENT_KINDS)
