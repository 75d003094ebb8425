"""The plugin's hooks: registers the ``deepspeed`` training backend and its ``deepspeed_config`` sections.

This module must stay free of torch and deepspeed imports: ``rlcore plugins``, config loading and the dry
run import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlcore import hookimpl
from rlcore_plugin_deepspeed.config import DeepSpeedConfig

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_training_backends(register: Callable[..., None]) -> None:
    """Register the DeepSpeed backend as ``deepspeed``."""
    register(
        "deepspeed",
        "rlcore_plugin_deepspeed.backend:DeepSpeedBackend",
        description="DeepSpeed ZeRO-1/2/3 actor/rollout/ref and critic workers; CPU (gloo) or CUDA (nccl)",
    )


@hookimpl
def config_defaults() -> dict[str, Any]:
    """The ``deepspeed_config`` sections of the actor, the reference model and the critic
    (:class:`~rlcore_plugin_deepspeed.config.DeepSpeedConfig`, mounted under each role)."""
    return {
        "actor_rollout_ref": {
            "actor": {"deepspeed_config": DeepSpeedConfig()},
            "ref": {"deepspeed_config": DeepSpeedConfig()},
        },
        "critic": {"deepspeed_config": DeepSpeedConfig()},
    }
