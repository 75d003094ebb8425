"""The ``fsdp`` training backend component: a pair of worker classes."""

from __future__ import annotations

from rlcore_plugin_fsdp.actor import ActorRolloutRefWorker
from rlcore_plugin_fsdp.critic import CriticWorker


class FSDPBackend:
    """PyTorch FSDP2 backend: ``actor_worker`` serves actor/rollout/ref roles, ``critic_worker`` the critic."""

    actor_worker = ActorRolloutRefWorker
    critic_worker = CriticWorker
