"""The plugin's hooks: registers the ``deepspeed`` training backend and its ``deepspeed_config`` sections.

This module must stay free of torch and deepspeed imports: ``rlcore plugins``, config loading and the dry
run import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlcore import hookimpl

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"

#: defaults of every ``deepspeed_config`` section (verl's engine key names); see the README for their meaning
DEEPSPEED_CONFIG_DEFAULTS: dict[str, Any] = {
    "zero_stage": 2,
    "offload": "none",
    "dtype": None,
}


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
    """The ``deepspeed_config`` sections of the actor, the reference model and the critic."""
    return {
        "actor_rollout_ref": {
            "actor": {"deepspeed_config": dict(DEEPSPEED_CONFIG_DEFAULTS)},
            "ref": {"deepspeed_config": dict(DEEPSPEED_CONFIG_DEFAULTS)},
        },
        "critic": {"deepspeed_config": dict(DEEPSPEED_CONFIG_DEFAULTS)},
    }
