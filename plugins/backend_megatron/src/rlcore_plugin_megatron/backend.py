"""The ``megatron`` training backend component: builds :class:`~rlcore_plugin_megatron.engine.MegatronEngine`
engines."""

from __future__ import annotations

from omegaconf import DictConfig

from rlcore.api import EngineRequest, EngineRole
from rlcore_plugin_megatron.engine import MegatronEngine, check_config


class MegatronBackend:
    """megatron-core: one :class:`MegatronEngine` per model (actor, reference, critic) on every rank."""

    @staticmethod
    def check_config(config: DictConfig, role: EngineRole, section: str, model_section: str) -> None:
        """Reject settings the Megatron engine cannot run (see :func:`rlcore_plugin_megatron.engine.check_config`)."""
        check_config(config, role, section, model_section)

    @staticmethod
    def create_engine(request: EngineRequest) -> MegatronEngine:
        """Build the engine ``request`` describes."""
        return MegatronEngine(request)
