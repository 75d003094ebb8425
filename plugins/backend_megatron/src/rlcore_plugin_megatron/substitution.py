"""verl's MindSpeed engine as a named substitution: ``model_engine=mindspeed`` is trained by this Megatron engine.

MindSpeed is megatron-core patched for Ascend NPUs (``mindspeed``, ``mindspeed_llm``, ``torch_npu``): it does not
run on this machine's CPUs or on CUDA. The config layer renames the keys of ``<role>.mindspeed`` that verl's
Megatron section shares (``rlcore.config.aliases``: ``mindspeed.tensor_model_parallel_size`` ->
``megatron.tensor_model_parallel_size``, ...); its ``mcore_kwargs`` and ``fsdp_kwargs`` (MindSpeed-LLM's layer specs
and kernels) are refused. This module writes the plan's substitution line. Torch-free.
"""

from __future__ import annotations

from omegaconf import DictConfig

from rlcore.api import select

#: the plan line of the substitution
SUBSTITUTION_LINE = (
    "model_engine=mindspeed: trained by rlcore's Megatron engine (MindSpeed is megatron-core with Ascend NPU "
    "patches; it needs torch_npu and does not run here); mapped: mindspeed.tensor/pipeline/virtual-pipeline/"
    "context/expert/expert-tensor parallel sizes, sequence_parallel, param/grad/optimizer_offload, use_mbridge, "
    "vanilla_mbridge, seed -> megatron.*"
)


def mindspeed_plan_lines(config: DictConfig) -> list[str]:
    """The substitution line when ``model_engine=mindspeed`` chose the engine (verl's
    ``actor_rollout_ref.actor.mindspeed.strategy: mindspeed_megatron`` marks it); nothing otherwise."""
    if select(config, "actor_rollout_ref.actor.mindspeed.strategy") != "mindspeed_megatron":
        return []
    return [SUBSTITUTION_LINE]
