"""The worker groups of a run, by placement: who generates, who trains, and how weights move between them.

``trainer.placement=colocated`` (the hybrid engine, any executor): one actor group of role
``actor_rollout_ref`` (or ``actor_rollout`` without a reference model) trains *and* generates, and its
``sync_weights()`` pushes the weights into its own rollout engine. ``trainer.placement=split``
(``trainer.executor=ray``): an ``actor_ref`` (or ``actor``) group on the ``train`` pool trains, a ``rollout``
group on the ``rollout`` pool generates, and :func:`sync_weights` sends the trainer's full state dict
(rank 0's, on CPU, in buckets) to every rollout rank. A critic group, when used, shares the ``train`` pool; a reward-model
group too, unless ``reward_model.enable_resource_pool`` gives it the ``reward`` pool.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from omegaconf import DictConfig

from rlcore.api.extensions import StepExtension
from rlcore.api.groups import ActorGroup, ActorRole, CriticGroup, RewardModelGroup, WorkerGroup
from rlcore.config.pools import placement_mode, reward_pool
from rlcore.controller.placement import POOL_REWARD, POOL_ROLLOUT, POOL_TRAIN
from rlcore.controller.worker_group import make_worker_group
from rlcore.controller.worker_spec import WorkerSpec


def sync_weights(actor: ActorGroup, rollout: ActorGroup) -> dict[str, float]:
    """Make ``rollout`` serve ``actor``'s current weights; returns the sync metrics.

    The same group (colocated): the actor worker's own ``sync_weights()``. Two groups (split): the actor
    workers gather their weights bucket by bucket (``begin_weight_export()``, then ``next_weight_bucket()``:
    collective; rank 0's CPU tensors, at most ``rollout.checkpoint_engine.update_weights_bucket_megabytes``
    per bucket, or all in one without a bound); each bucket goes to every rollout worker's
    ``receive_weight_bucket()``, and ``receive_weights()`` then loads them into the engine and checks them.
    Adds ``actor/weight_sync_buckets``.
    """
    if rollout is actor:
        return actor.sync_weights()
    start = time.perf_counter()
    actor.begin_weight_export()
    count = 0
    while (bucket := actor.next_weight_bucket()) is not None:
        rollout.receive_weight_bucket(bucket)
        count += 1
    metrics = dict(rollout.receive_weights())
    metrics["actor/weight_sync_buckets"] = float(count)
    metrics["actor/weight_sync_s"] = time.perf_counter() - start
    return metrics


@dataclass
class WorkerGroups:
    """The groups of a run. ``rollout is actor`` with colocated placement; ``critic`` and ``reward_model`` are
    None without one."""

    actor: ActorGroup
    rollout: ActorGroup
    critic: CriticGroup | None = None
    reward_model: RewardModelGroup | None = None
    #: the plugins' step extensions' groups, by extension name (:mod:`rlcore.api.extensions`)
    extensions: dict[str, WorkerGroup] = field(default_factory=dict)

    @property
    def split(self) -> bool:
        """Whether generation runs on its own group (``trainer.placement=split``)."""
        return self.rollout is not self.actor

    def distinct(self) -> list[WorkerGroup]:
        """Every group once: actor, then rollout (when split), then critic and reward model (when used), then
        the step extensions' groups."""
        groups: list[WorkerGroup] = [self.actor]
        if self.split:
            groups.append(self.rollout)
        groups += [group for group in (self.critic, self.reward_model) if group is not None]
        return groups + list(self.extensions.values())

    def init_models(self) -> None:
        """``init_model()`` on every group, then (split) the first weight sync to the rollout group."""
        for group in self.distinct():
            group.init_model()
        if self.split:
            self.sync_weights()

    def sync_weights(self) -> dict[str, float]:
        """:func:`sync_weights` from the actor group to the rollout group."""
        return sync_weights(self.actor, self.rollout)

    def pop_compute_s(self) -> dict[str, float]:
        """Worker-side seconds per method since the last call, summed over the groups, and reset."""
        out: dict[str, float] = {}
        for group in self.distinct():
            for method, seconds in group.pop_compute_s().items():
                out[method] = out.get(method, 0.0) + seconds
        return out

    def pop_peak_memory_gb(self) -> dict[str, tuple[float, float]]:
        """Peak CUDA GiB (allocated, reserved) per worker method since the last call, the largest over the
        groups, and reset."""
        out: dict[str, tuple[float, float]] = {}
        for group in self.distinct():
            for method, (allocated, reserved) in group.pop_peak_memory_gb().items():
                before = out.get(method, (0.0, 0.0))
                out[method] = (max(before[0], allocated), max(before[1], reserved))
        return out

    def shutdown(self) -> None:
        """Shut every group down, even when one of them fails to."""
        errors: list[BaseException] = []
        for group in self.distinct():
            try:
                group.shutdown()
            except Exception as exc:  # noqa: BLE001 - the others must still be released
                errors.append(exc)
        if errors:
            raise errors[0]


def build_worker_groups(
    config: DictConfig,
    *,
    use_reference: bool,
    use_critic: bool,
    use_reward_model: bool = False,
    reward_model_worker: str | None = None,
    extensions: Sequence[StepExtension] = (),
) -> WorkerGroups:
    """Create the run's worker groups for ``trainer.placement`` (models are loaded by ``init_models()``).

    The workers build their engines with the backends of ``actor_rollout_ref.actor.strategy`` and
    ``critic.strategy`` (and ``reward_model.strategy``). The reward-model group builds ``reward_model_worker``
    (a :class:`WorkerSpec` name, e.g. an algorithm's own reward model) or the core's discriminative one. Each
    step extension with a worker gets a group of role ``extension.name`` on the ``train`` pool. Groups already
    created are shut down again when a later one fails to start.
    """
    split = placement_mode(config) == "split"
    actor_spec = WorkerSpec("actor")
    created: list[WorkerGroup] = []
    role: ActorRole
    try:
        if split:
            role = "actor_ref" if use_reference else "actor"
            actor = make_worker_group(actor_spec, config, role, POOL_TRAIN)
            created.append(actor)
            rollout = make_worker_group(actor_spec, config, "rollout", POOL_ROLLOUT)
            created.append(rollout)
        else:
            role = "actor_rollout_ref" if use_reference else "actor_rollout"
            actor = rollout = make_worker_group(actor_spec, config, role, POOL_TRAIN)
            created.append(actor)
        critic: CriticGroup | None = None
        if use_critic:
            critic = make_worker_group(WorkerSpec("critic"), config, "critic", POOL_TRAIN)
            created.append(critic)
        reward_model: RewardModelGroup | None = None
        if use_reward_model:
            spec = WorkerSpec(reward_model_worker or "reward_model")
            pool = POOL_REWARD if reward_pool(config) else POOL_TRAIN
            reward_model = make_worker_group(spec, config, "reward_model", pool)
            created.append(reward_model)
        extension_groups: dict[str, WorkerGroup] = {}
        for extension in extensions:
            if extension.worker is not None:
                group = make_worker_group(WorkerSpec(extension.worker), config, extension.name, POOL_TRAIN)
                created.append(group)
                extension_groups[extension.name] = group
        return WorkerGroups(actor, rollout, critic, reward_model, extension_groups)
    except BaseException:
        for group in reversed(created):
            group.shutdown()
        raise
