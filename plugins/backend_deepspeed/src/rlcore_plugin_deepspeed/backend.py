"""The ``deepspeed`` training backend component: builds :class:`~rlcore_plugin_deepspeed.engine.DeepSpeedEngine`
engines."""

from __future__ import annotations

from omegaconf import DictConfig

from rlcore.api import EngineRequest, EngineRole
from rlcore_plugin_deepspeed.engine import DeepSpeedEngine, check_config


class DeepSpeedBackend:
    """DeepSpeed ZeRO: one :class:`DeepSpeedEngine` per model (actor, reference, critic) on every rank."""

    @staticmethod
    def check_config(config: DictConfig, role: EngineRole, section: str, model_section: str) -> None:
        """Reject settings the DeepSpeed engine cannot run (see :func:`rlcore_plugin_deepspeed.engine.check_config`)."""
        check_config(config, role, section, model_section)

    @staticmethod
    def create_engine(request: EngineRequest) -> DeepSpeedEngine:
        """Build the engine ``request`` describes."""
        return DeepSpeedEngine(request)
