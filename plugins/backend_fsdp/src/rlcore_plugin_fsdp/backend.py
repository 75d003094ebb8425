"""The ``fsdp`` training backend component: builds :class:`~rlcore_plugin_fsdp.engine.FSDPEngine` engines."""

from __future__ import annotations

from omegaconf import DictConfig

from rlcore.api import EngineRequest, EngineRole
from rlcore_plugin_fsdp.engine import FSDPEngine, check_config


class FSDPBackend:
    """PyTorch FSDP2: one :class:`FSDPEngine` per model (actor, reference, critic) on every rank."""

    @staticmethod
    def check_config(config: DictConfig, role: EngineRole, section: str, model_section: str) -> None:
        """Reject settings the FSDP engine cannot run (see :func:`rlcore_plugin_fsdp.engine.check_config`)."""
        check_config(config, role, section, model_section)

    @staticmethod
    def create_engine(request: EngineRequest) -> FSDPEngine:
        """Build the engine ``request`` describes."""
        return FSDPEngine(request)
