"""The plugin's hooks: registers the ``fsdp`` training backend and its ``fsdp_config`` sections.

This module must stay free of torch imports: ``rlcore plugins`` and config loading import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlcore import hookimpl
from rlcore.api import TrainingBackendSpec
from rlcore_plugin_fsdp.config import FSDPConfig
from rlcore_plugin_fsdp.substitution import substitution_plan_lines, turbo_plan_lines

if TYPE_CHECKING:
    from omegaconf import DictConfig

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_training_backends(register: Callable[..., None]) -> None:
    """Register the FSDP2 backend as ``fsdp`` (alias ``fsdp2``)."""
    register(
        "fsdp",
        "rlcore_plugin_fsdp.backend:FSDPBackend",
        description="PyTorch FSDP2 (fully_shard) actor/rollout/ref and critic workers; CPU (gloo) or CUDA (nccl)",
        aliases=("fsdp2",),
        spec=TrainingBackendSpec(sum_pi_squared=True),
    )


@hookimpl
def config_defaults() -> dict[str, Any]:
    """The ``fsdp_config`` sections of the actor, the reference model, the critic and the reward model
    (:class:`~rlcore_plugin_fsdp.config.FSDPConfig`, mounted under each role)."""
    return {
        "actor_rollout_ref": {"actor": {"fsdp_config": FSDPConfig()}, "ref": {"fsdp_config": FSDPConfig()}},
        "critic": {"fsdp_config": FSDPConfig()},
        "reward_model": {"fsdp_config": FSDPConfig()},
    }


@hookimpl
def plan_lines(config: DictConfig, dry_run: bool) -> list[str]:
    """``model_engine=veomni``'s and ``=torchtitan``'s and ``strategy=fsdp_turbo``'s substitution lines and their
    notes (:mod:`rlcore_plugin_fsdp.substitution`)."""
    return substitution_plan_lines(config) + turbo_plan_lines(config)
