"""The worker groups of a run, by placement: who generates, who trains, and how weights move between them.

``trainer.placement=colocated`` (the hybrid engine, any executor): one actor group of role
``actor_rollout_ref`` (or ``actor_rollout`` without a reference model) trains *and* generates, and its
``sync_weights()`` pushes the weights into its own rollout engine. ``trainer.placement=split``
(``trainer.executor=ray``): an ``actor_ref`` (or ``actor``) group on the ``train`` pool trains, a ``rollout``
group on the ``rollout`` pool generates, and :func:`sync_weights` sends the trainer's weights (rank 0's, on
CPU, in buckets) to every rollout rank through the run's weight transport (``checkpoint_engine.backend``:
all of them with ``naive``, the changed elements with ``delta``). A critic group, when used, shares the ``train`` pool; a reward-model
group too, unless ``reward_model.enable_resource_pool`` gives it the ``reward`` pool.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from rlcore.api.extensions import StepExtension
from rlcore.api.groups import ActorGroup, ActorRole, CriticGroup, RewardModelGroup, WorkerGroup
from rlcore.api.transport import WeightBucket, WeightTransport
from rlcore.config.pools import placement_mode, reward_pool
from rlcore.config.sections.rollout import RolloutConfig
from rlcore.controller.placement import POOL_REWARD, POOL_ROLLOUT, POOL_TRAIN
from rlcore.controller.worker_group import make_worker_group
from rlcore.controller.worker_spec import WorkerSpec
from rlcore.errors import RLCoreError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


def sync_weights(
    actor: ActorGroup,
    rollout: ActorGroup,
    transport: WeightTransport | None = None,
    bucket_bytes: int | None = None,
    receiver: GroupReceiver | None = None,
) -> dict[str, float]:
    """Make ``rollout`` serve ``actor``'s current weights; returns the sync metrics.

    The same group (colocated): the actor worker's own ``sync_weights()`` (through its own transport). Two
    groups (split): the actor workers gather their weights bucket by bucket (``begin_weight_export()``, then
    ``next_weight_bucket()``: collective; rank 0's CPU tensors, at most
    ``rollout.checkpoint_engine.update_weights_bucket_megabytes`` per bucket, or all in one without a bound);
    ``transport`` (``checkpoint_engine.backend``, here in the controller) hands them on to every rollout
    worker's ``receive_weight_bucket()`` in buckets of ``bucket_bytes``, and ``receive_weights()`` then loads
    them into the engine and checks them (``receiver``: the rollout group's receive side, kept from sync to
    sync, which knows the engines' weight version). Adds ``actor/weight_sync_buckets`` and the transport's
    metrics. A partial send whose bucket checksum or check fails is sent again in full.
    """
    if rollout is actor:
        return actor.sync_weights()
    start = time.perf_counter()
    if transport is None or receiver is None:
        raise RLCoreError("a split placement's weight sync needs the run's weight transport and receiver")
    try:
        metrics = _send_to_group(actor, receiver, transport, bucket_bytes)
    except RLCoreError as exc:
        if not transport.incremental:
            raise
        log.warning("%s; resending every weight", exc)
        transport.reset()
        metrics = _send_to_group(actor, receiver, transport, bucket_bytes)
    metrics["actor/weight_sync_s"] = time.perf_counter() - start
    return metrics


def _send_to_group(
    actor: ActorGroup, receiver: GroupReceiver, transport: WeightTransport, bucket_bytes: int | None
) -> dict[str, float]:
    """One export of the actor group's weights through ``transport`` into the rollout group."""
    actor.begin_weight_export()

    def exported() -> Iterator[tuple[str, torch.Tensor]]:
        while (bucket := actor.next_weight_bucket()) is not None:
            yield from bucket.items()

    try:
        report = transport.send(exported(), receiver, bucket_bytes)
    except RLCoreError:
        while actor.next_weight_bucket() is not None:  # the export is collective: finish it on every rank
            pass
        transport.reset()
        raise
    metrics = {**receiver.metrics, **report.metrics}
    metrics["actor/weight_sync_buckets"] = float(report.buckets)
    return metrics


class GroupReceiver:
    """The receive side of a rollout worker group (split placement): each bucket goes to every rollout
    worker's ``receive_weight_bucket()`` with its digest, then ``receive_weights()`` loads and checks them."""

    def __init__(self, rollout: ActorGroup, *, keep: bool) -> None:
        self.rollout = rollout
        self.keep = keep
        #: the metrics of the last ``receive_weights()``
        self.metrics: dict[str, float] = {}
        self._version = -1
        self._dtype: torch.dtype | None = None

    @property
    def version(self) -> int:
        """The rollout engines' weight version after this receiver's last load (-1 before one)."""
        return self._version

    @property
    def partial(self) -> bool:
        """When ``keep``: a rollout worker that keeps the last weights completes a partial update (and applies
        deltas) itself."""
        return self.keep

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the rollout engines hold their weights in (rank 0's ``rollout_dtype()``, asked once)."""
        if self._dtype is None:
            self._dtype = self.rollout.rollout_dtype()
        return self._dtype

    def load(self, buckets: Iterator[WeightBucket], *, full: bool) -> None:
        """Every bucket to every rollout worker, then one ``receive_weights()``."""
        for bucket in buckets:
            self.rollout.receive_weight_bucket(dict(bucket.tensors), bucket.digest, dict(bucket.deltas))
        self.metrics = dict(self.rollout.receive_weights(partial=not full, keep=self.keep))
        self._version = int(self.metrics.get("rollout/weight_version", -1))


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
    #: split placement: the run's weight transport, in the controller (colocated workers build their own)
    transport: WeightTransport | None = None
    #: split placement: ``checkpoint_engine.update_weights_bucket_megabytes`` in bytes (None: no bound)
    bucket_bytes: int | None = None
    #: split placement: the rollout group's receive side
    receiver: GroupReceiver | None = None

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
        return sync_weights(self.actor, self.rollout, self.transport, self.bucket_bytes, self.receiver)

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
    transport: type[WeightTransport] | None = None,
) -> WorkerGroups:
    """Create the run's worker groups for ``trainer.placement`` (models are loaded by ``init_models()``).

    The workers build their engines with the backends of ``actor_rollout_ref.actor.strategy`` and
    ``critic.strategy`` (and ``reward_model.strategy``). The reward-model group builds ``reward_model_worker``
    (a :class:`WorkerSpec` name, e.g. an algorithm's own reward model) or the core's discriminative one. Each
    step extension with a worker gets a group of role ``extension.name`` on the ``train`` pool. A split
    placement builds ``transport`` (``checkpoint_engine.backend``'s class; None: the built-in ``naive``) in the
    controller. Groups already created are shut down again when a later one fails to start.
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
        groups = WorkerGroups(actor, rollout, critic, reward_model, extension_groups)
        if split:
            from rlcore.rollout.transport import NaiveTransport  # torch: not at start-up

            section = RolloutConfig.from_tree(config)
            groups.transport = (transport or NaiveTransport)(section.checkpoint_engine)
            groups.bucket_bytes = section.sync_bucket_bytes
            groups.receiver = GroupReceiver(rollout, keep=groups.transport.incremental)
        return groups
    except BaseException:
        for group in reversed(created):
            group.shutdown()
        raise
