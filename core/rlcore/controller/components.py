"""The components of a run, resolved once: :class:`RunComponents`.

``rlcore run`` resolves every component the config names from the registry in the controller process,
before anything starts (:func:`rlcore.run.check_components`: an unknown name or a bad spec is reported
then, naming its config key), and hands the result to the :class:`~rlcore.controller.trainer.Trainer`,
which looks nothing up. A reader follows ``algorithm.adv_estimator`` from the config to
:attr:`RunComponents.estimator` and from there to its call in ``Trainer._compute_advantage``.

Workers in other processes resolve what they need once, at their init: the actor worker its policy loss
and rollout engine, every worker its training backend.

This module imports no torch: ``rlcore run`` imports it at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlcore.api.extensions import StepExtension
    from rlcore.api.specs import AdvantageEstimatorSpec, TrainingBackendSpec
    from rlcore.registry import Component


@dataclass(frozen=True)
class RunComponents:
    """What a run of the config calls, each resolved from the registry once (a :class:`~rlcore.registry.Component`
    imports its target on its first ``load()`` and keeps it).

    Attributes:
        estimator: ``algorithm.adv_estimator``, with its spec (``needs_critic``, ``batch_keys``, ...).
        policy_loss: ``actor_rollout_ref.actor.policy_loss.loss_mode`` (the actor workers load it at their init).
        actor_backend: ``actor_rollout_ref.actor.strategy``, with its spec.
        reward_manager: ``reward_model.reward_manager`` (a class, built with the tokenizer and the scorer).
        batch_filters: ``algorithm.batch_filters``, in order.
        extensions: the plugins' step extensions (their ``step_extensions`` hook), in plugin order.
        weight_transport: ``actor_rollout_ref.rollout.checkpoint_engine.backend`` (a class; the controller builds
            it for a split placement, the actor workers their own; None: the built-in ``naive``).
    """

    estimator: Component[AdvantageEstimatorSpec]
    policy_loss: Component[Any]
    actor_backend: Component[TrainingBackendSpec]
    reward_manager: Component[Any]
    batch_filters: tuple[Component[Any], ...]
    extensions: tuple[StepExtension, ...]
    weight_transport: Component[Any] | None = None
