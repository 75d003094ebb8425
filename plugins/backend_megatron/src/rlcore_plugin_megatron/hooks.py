"""The plugin's hooks: registers the ``megatron`` training backend and its ``megatron`` config sections, and
adds the notes on (and the problem of) those keys to the run plan.

This module must stay free of torch (and megatron-core) imports: ``rlcore plugins``, config loading and
the dry run import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from rlcore import hookimpl
from rlcore.api import TrainingBackendSpec, select
from rlcore_plugin_megatron.config import MegatronConfig, MegatronLoRAConfig
from rlcore_plugin_megatron.settings import (
    layout_sizes,
    resolve_settings,
)
from rlcore_plugin_megatron.substitution import mindspeed_plan_lines, mlite_plan_lines

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


def data_parallel_size(config: DictConfig, section: str, world_size: int) -> int:
    """The data-parallel size of the engine at ``section`` over ``world_size`` ranks:
    ``world_size ÷ (tensor × pipeline × context parallel size)`` of ``{section}.megatron``.

    Registered as the backend's ``TrainingBackendSpec.data_parallel_size``, so that the dry run and the worker group
    split batches over data-parallel ranks only; an error names the keys when the sizes do not divide.
    """
    key = f"{section}.megatron"
    return layout_sizes(resolve_settings(select(config, key), key), world_size)


@hookimpl
def register_training_backends(register: Callable[..., None]) -> None:
    """Register the megatron-core backend as ``megatron``."""
    register(
        "megatron",
        "rlcore_plugin_megatron.backend:MegatronBackend",
        description=(
            "megatron-core GPTModel (tensor + pipeline + context + expert parallel) actor/ref and critic; "
            "Qwen2/Qwen3/Llama, Qwen3-MoE"
        ),
        spec=TrainingBackendSpec(data_parallel_size=data_parallel_size, sum_pi_squared=True),
    )


@hookimpl
def config_defaults() -> dict[str, Any]:
    """The ``megatron`` sections of the actor, the reference model and the critic, and the actor model's
    ``lora`` section (LoRA on the Megatron backend) (verl's key names), typed (:mod:`rlcore_plugin_megatron.config`)."""
    return {
        "actor_rollout_ref": {
            "model": {"lora": MegatronLoRAConfig()},
            "actor": {"megatron": MegatronConfig()},
            "ref": {"megatron": MegatronConfig()},
        },
        "critic": {"megatron": MegatronConfig()},
    }


@hookimpl
def plan_lines(config: DictConfig) -> list[str] | None:
    """``model_engine=mindspeed``'s and Megatron-Lite's substitution lines (:mod:`rlcore_plugin_megatron.substitution`;
    Megatron-Lite's sharded optimizer over several data-parallel ranks raises :class:`~rlcore.api.ConfigError`), then the
    plan's notes on the Megatron keys that change nothing here (:mod:`rlcore_plugin_megatron.plan_notes`);
    ``model.lora.rank`` on an actor of another backend raises :class:`~rlcore.api.ConfigError` and stops the run."""
    from rlcore_plugin_megatron.plan_notes import plan_notes

    return [*mindspeed_plan_lines(config), *mlite_plan_lines(config), *plan_notes(config)] or None
