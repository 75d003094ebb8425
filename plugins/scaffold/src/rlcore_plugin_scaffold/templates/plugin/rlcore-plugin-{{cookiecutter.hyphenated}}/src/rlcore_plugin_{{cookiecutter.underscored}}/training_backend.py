"""The training backend ``{{ cookiecutter.hyphenated }}`` (``actor_rollout_ref.actor.strategy={{ cookiecutter.hyphenated }}``).

What it does: builds its training engines with the backend registered as :data:`BASE_BACKEND` (the
``fsdp`` backend of ``rlcore-plugin-fsdp``), resolved through the plugin registry in each worker process.
rlcore's generic workers run everything around the engines (roles, rollout, PPO loop, checkpoints).

What to change: return your own engine from :meth:`Backend.create_engine` — a class with the methods of
:class:`rlcore.api.training.TrainingEngine` (forward, forward_backward, optimizer_step, full weights,
sharded save/load; rlcore's ``docs/writing-an-engine.md`` walks through one) — and reject the settings it
cannot run in :meth:`Backend.check_config`. A backend that no longer delegates can drop the
``rlcore-plugin-fsdp`` dependency from ``pyproject.toml``. ``tests/test_training_backend.py`` runs rlcore's
contract suite on it.
"""

from __future__ import annotations

from typing import Any

from rlcore import get_component
from rlcore.api import EngineRequest, EngineRole, TrainingEngine

#: the registered training backend whose engines this one builds
BASE_BACKEND = "fsdp"


class Backend:
    """The component: checks configs and creates one training engine per model on each rank."""

    @staticmethod
    def check_config(config: Any, role: EngineRole, section: str, model_section: str) -> None:
        """Reject settings of ``section`` the engine cannot run (here: whatever the base backend rejects)."""
        get_component("training_backend", BASE_BACKEND).check_config(config, role, section, model_section)

    @staticmethod
    def create_engine(request: EngineRequest) -> TrainingEngine:
        """The engine of ``request.role`` (``actor``, ``ref`` or ``critic``) on this rank."""
        return get_component("training_backend", BASE_BACKEND).create_engine(request)
