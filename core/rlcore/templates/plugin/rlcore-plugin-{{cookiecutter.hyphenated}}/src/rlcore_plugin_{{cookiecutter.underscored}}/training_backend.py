"""The training backend ``{{ cookiecutter.hyphenated }}`` (``actor_rollout_ref.actor.strategy={{ cookiecutter.hyphenated }}``).

What it does: delegates every worker call to the backend registered as :data:`BASE_BACKEND` (the
``fsdp`` backend of ``rlcore-plugin-fsdp``), resolved through the plugin registry in each worker process.
rlcore has no public base class for backends, so this module relies only on the documented contract:
a backend is a class with ``actor_worker`` and ``critic_worker``; a worker is constructed as
``Worker(config, role, rank, world_size)`` and has the methods below (the method table in rlcore's
``docs/architecture.md``). The controller only ever calls those methods.

What to change: wrap a method to add behaviour around the base backend's (e.g. extra metrics in
``update_actor``), or replace the delegation by your own implementation (Megatron, DeepSpeed, a custom
sharding): build the model in ``init_model``, compute log-probs and entropies, and build the actor loss
with :func:`rlcore.algos.build_actor_loss` so that every registered policy loss works. A backend that no
longer delegates can drop the ``rlcore-plugin-fsdp`` dependency from ``pyproject.toml``.
``tests/test_training_backend.py`` runs rlcore's contract suite on it.
"""

from __future__ import annotations

from typing import Any

from rlcore import get_component

#: the registered training backend the workers delegate to
BASE_BACKEND = "fsdp"


def base_worker(attr: str) -> type:
    """The :data:`BASE_BACKEND` backend's ``actor_worker`` or ``critic_worker`` class."""
    return getattr(get_component("training_backend", BASE_BACKEND), attr)


class DelegatingWorker:
    """Holds the base backend's worker of the same kind and role; subclasses forward method calls to it."""

    #: ``actor_worker`` or ``critic_worker``
    base_attr = ""

    def __init__(self, config: Any, role: str, rank: int, world_size: int) -> None:
        self.worker = base_worker(self.base_attr)(config, role, rank=rank, world_size=world_size)

    def init_model(self) -> None:
        """Build the models, optimizers and engines of this worker's role."""
        self.worker.init_model()

    def save_checkpoint(self, path: str) -> None:
        """Write this worker's state under ``path``."""
        self.worker.save_checkpoint(path)

    def load_checkpoint(self, path: str) -> None:
        """Restore what :meth:`save_checkpoint` wrote."""
        self.worker.load_checkpoint(path)

    def shutdown(self) -> None:
        """Release the worker's resources (process group, engines) when the base worker has any."""
        close = getattr(self.worker, "shutdown", None)
        if callable(close):
            close()


class ActorWorker(DelegatingWorker):
    """The actor / rollout / reference worker (roles ``actor_rollout_ref``, ``actor_rollout``, ``actor``,
    ``rollout``, ``ref``)."""

    base_attr = "actor_worker"

    def generate_sequences(self, batch: Any) -> Any:
        """Sample responses for the prompts of ``batch`` with the rollout engine."""
        return self.worker.generate_sequences(batch)

    def compute_log_prob(self, batch: Any) -> Any:
        """``old_log_probs`` and ``entropys`` ``[B, R]`` of the responses under the current policy."""
        return self.worker.compute_log_prob(batch)

    def compute_ref_log_prob(self, batch: Any) -> Any:
        """``ref_log_prob`` ``[B, R]`` under the reference policy."""
        return self.worker.compute_ref_log_prob(batch)

    def update_actor(self, batch: Any) -> Any:
        """One PPO update over ``batch``; returns an empty batch whose ``meta["metrics"]`` holds ``actor/*``."""
        return self.worker.update_actor(batch)

    def sync_weights(self) -> dict[str, float]:
        """Push the trained weights to the rollout engine; returns the sync metrics."""
        return self.worker.sync_weights()


class CriticWorker(DelegatingWorker):
    """The critic worker (role ``critic``)."""

    base_attr = "critic_worker"

    def compute_values(self, batch: Any) -> Any:
        """``values`` ``[B, R]`` of the responses."""
        return self.worker.compute_values(batch)

    def update_critic(self, batch: Any) -> Any:
        """One value-function update; returns an empty batch whose ``meta["metrics"]`` holds ``critic/*``."""
        return self.worker.update_critic(batch)


class Backend:
    """The component: the worker classes rlcore builds for the actor and the critic roles."""

    actor_worker = ActorWorker
    critic_worker = CriticWorker
