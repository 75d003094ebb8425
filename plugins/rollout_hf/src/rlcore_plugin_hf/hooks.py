"""The plugin's hooks: registers the ``hf`` rollout engine and prints its lines of the run's plan.

This module must stay free of torch and transformers imports: ``rlcore plugins``, config loading and the dry
run import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlcore import hookimpl

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_rollout_engines(register: Callable[..., None]) -> None:
    """Register :class:`rlcore_plugin_hf.engine.HFRolloutEngine` as ``hf``."""
    register("hf", "rlcore_plugin_hf.engine:HFRolloutEngine", description="transformers KV-cache sampler (CPU/GPU)")


@hookimpl
def plan_lines(config: Any) -> list[str]:
    """The plan's lines for the HF engine's chunks and its routing recording (R3); a setting the engine cannot
    run (a bad ``rollout.max_num_batched_tokens``, R3 with another engine, agent loops or a dense model)
    raises :class:`rlcore.errors.RLCoreError` and stops the run."""
    from rlcore_plugin_hf.chunking import describe_chunking
    from rlcore_plugin_hf.routing_plan import describe_routing_replay

    lines = [describe_chunking(config), describe_routing_replay(config)]
    return [line for line in lines if line]
