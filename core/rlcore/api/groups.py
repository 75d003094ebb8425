"""The worker groups as the controller sees them: typed protocols of the calls it makes.

A group (:class:`~rlcore.controller.worker_group.LocalWorkerGroup` or
:class:`~rlcore.controller.ray_executor.RayWorkerGroup`) forwards ``group.method(...)`` to the same method
of its workers on every rank, splitting a leading :class:`~rlcore.api.batch.Batch` over the data-parallel
ranks and concatenating the results. These protocols name those methods, so that a reader (and a type
checker) can follow a step from :mod:`rlcore.controller.trainer` to the worker: each method here is
implemented by :class:`rlcore.workers.actor.ActorRolloutRefWorker`,
:class:`rlcore.workers.critic.CriticWorker` or :class:`rlcore.workers.reward_model.RewardModelWorker`, whose docstrings say what it does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    import torch

    from rlcore.api.batch import Batch
    from rlcore.api.transport import SparseDelta


#: the roles of :class:`rlcore.workers.actor.ActorRolloutRefWorker` (its ``ROLE_PARTS``): their groups are
#: :class:`ActorGroup`\ s
ActorRole = Literal["actor_rollout_ref", "actor_rollout", "actor", "actor_ref", "rollout", "ref"]


class WorkerGroup(Protocol):
    """What every group offers, whatever its role."""

    #: the role its workers were built for (``actor_rollout_ref``, ``rollout``, ``critic``, ...)
    role: str
    #: how many ranks (processes) it has
    world_size: int

    @property
    def dp_size(self) -> int:
        """How many chunks a batch is cut into (world size ÷ model-parallel size)."""
        ...

    def init_model(self) -> None:
        """Build every rank's engines (and the rollout engine, by role)."""
        ...

    def save_checkpoint(self, path: str | Path) -> None:
        """Write the role's checkpoint into ``path`` (collective)."""
        ...

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore what :meth:`save_checkpoint` wrote."""
        ...

    def pop_compute_s(self) -> dict[str, float]:
        """Seconds spent inside each worker method since the last call (the slowest rank), and reset."""
        ...

    def pop_peak_memory_gb(self) -> dict[str, tuple[float, float]]:
        """Peak CUDA GiB (allocated, reserved) of each worker method since the last call, and reset."""
        ...

    def call_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call the worker method ``method`` on every rank and return every rank's result, in rank order."""
        ...

    def shutdown(self) -> None:
        """Release the workers (process groups, engines, Ray actors)."""
        ...


class ActorGroup(WorkerGroup, Protocol):
    """The policy side: :class:`rlcore.workers.actor.ActorRolloutRefWorker` on every rank."""

    def generate_sequences(self, batch: Batch) -> Batch:
        """Responses for the batch's prompts from the rollout engine."""
        ...

    def generate_partial(self, batch: Batch) -> Batch:
        """Partial rollout: at most ``batch.meta["max_new_tokens"]`` more tokens for the batch's unfinished rows,
        with per-token ``rollout_versions`` (:class:`~rlcore.api.rollout.SupportsPartialRollout`)."""
        ...

    def compute_log_prob(self, batch: Batch) -> Batch:
        """``old_log_probs`` and ``entropys`` under the current actor."""
        ...

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        """``ref_log_prob`` under the reference policy."""
        ...

    def update_actor(self, batch: Batch) -> Batch:
        """One PPO update; the result's ``meta["metrics"]`` holds ``actor/*``."""
        ...

    def device_peak(self) -> dict[str, str | float]:
        """Rank 0's device peak FLOPS (``device``, ``dtype``, ``tflops``, ``source``), the MFU denominator."""
        ...

    def sync_weights(self) -> dict[str, float]:
        """Push the actor's weights into the colocated rollout engine and check them."""
        ...

    def export_weights(self) -> dict[str, torch.Tensor]:
        """The actor's full weights on rank 0 (split placement)."""
        ...

    def begin_weight_export(self) -> None:
        """Start gathering the actor's weights bucket by bucket (split placement)."""
        ...

    def next_weight_bucket(self) -> dict[str, torch.Tensor] | None:
        """The next bucket of the export on rank 0 (CPU tensors by name); None once all were sent."""
        ...

    def rollout_dtype(self) -> torch.dtype:
        """The dtype rank 0's rollout engine holds its weights in (a weight transport sends them in it)."""
        ...

    def receive_weight_bucket(
        self,
        bucket: dict[str, torch.Tensor],
        digest: str | None = None,
        deltas: dict[str, SparseDelta] | None = None,
    ) -> None:
        """Keep one bucket of a trainer's weights for :meth:`receive_weights` (split placement): whole tensors
        and ``deltas`` (changed elements, applied to the weights the last ``keep`` load held), checking the
        resulting bytes against the sender's ``digest`` when given."""
        ...

    def receive_weights(
        self, state: dict[str, torch.Tensor] | None = None, *, partial: bool = False, keep: bool = False
    ) -> dict[str, float]:
        """Load a trainer's weights (None: the buckets received) into this group's rollout engines and check
        them (split placement); ``partial``: only the changed tensors, over the weights the last ``keep`` load
        held."""
        ...

    def save_model(self, path: str | Path) -> None:
        """The actor's current weights as a Hugging Face model (with the tokenizer) in the folder ``path``."""
        ...

    def load_rollout_state(self, states: list[dict[str, Any] | None]) -> None:
        """Restore every rank's rollout-engine state (``call_all("rollout_state")`` of a saved run, split
        placement); call it after the weights are synced."""
        ...


class CriticGroup(WorkerGroup, Protocol):
    """The value model: :class:`rlcore.workers.critic.CriticWorker` on every rank."""

    def compute_values(self, batch: Batch) -> Batch:
        """``values`` of the batch's responses."""
        ...

    def update_critic(self, batch: Batch) -> Batch:
        """One value-function update; the result's ``meta["metrics"]`` holds ``critic/*``."""
        ...


class RewardModelGroup(WorkerGroup, Protocol):
    """The frozen reward model: :class:`rlcore.workers.reward_model.RewardModelWorker` on every rank (it has no
    checkpoint: the controller never calls ``save_checkpoint`` or ``load_checkpoint`` on it)."""

    def compute_rm_score(self, batch: Batch) -> Batch:
        """``rm_scores`` ``[B, R]``: each response's reward-model score on its last valid token."""
        ...
