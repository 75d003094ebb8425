"""Which worker class a group builds: named by a string, so that only the string travels to a Ray actor."""

from __future__ import annotations

from dataclasses import dataclass

#: the core worker class of each worker kind, as lazy ``module:attr`` targets
WORKER_CLASSES: dict[str, str] = {
    "actor": "rlcore.workers.actor:ActorRolloutRefWorker",
    "critic": "rlcore.workers.critic:CriticWorker",
    "reward_model": "rlcore.workers.reward_model:RewardModelWorker",
}


@dataclass(frozen=True)
class WorkerSpec:
    """Which worker class to build: a name of :data:`WORKER_CLASSES` (``actor`` for the actor/rollout/reference
    roles, ``critic``, ``reward_model``) or any ``module:attr`` target, imported in the process that builds the worker.

    The core workers resolve their training backend (``*.strategy``) through the plugin registry of their
    own process, so nothing but this string and the config travels to a Ray actor.
    """

    worker: str

    def resolve(self) -> type:
        """The worker class (imported on first use: the core workers need torch)."""
        import importlib

        module, _, attr = WORKER_CLASSES.get(self.worker, self.worker).partition(":")
        return getattr(importlib.import_module(module), attr)
