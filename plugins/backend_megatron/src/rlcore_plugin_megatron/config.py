"""The Megatron backend's config sections (verl's key names) as typed sections with their defaults: the
``megatron`` section mounted under the actor, the reference model and the critic, and the actor model's
``lora`` section (torch-free: the hooks module returns them from ``config_defaults``). The README's tables say
what each key does; :func:`rlcore_plugin_megatron.settings.resolve_settings` and
:func:`rlcore_plugin_megatron.lora_settings.resolve_lora` check them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlcore.api import Section

#: where verl keeps the multi-token prediction settings (:mod:`rlcore_plugin_megatron.mtp` reads them)
MTP_KEY = "actor_rollout_ref.model.mtp"


@dataclass(frozen=True)
class MegatronConfig(Section):
    """``<role>.megatron``: the parallel layout, offloading and precision of a role's Megatron model."""

    #: tensor parallelism (attention heads, MLP, vocabulary)
    tensor_model_parallel_size: int = 1
    #: pipeline stages (an even split of the layers)
    pipeline_model_parallel_size: int = 1
    #: model chunks per pipeline rank (interleaved stages); needs pipeline_model_parallel_size > 1
    virtual_pipeline_model_parallel_size: int | None = None
    #: context parallelism: each rank of a group holds 1/cp of every sequence's tokens
    context_parallel_size: int = 1
    #: expert parallelism (a MoE model): each rank holds E / ep of every layer's E experts
    expert_model_parallel_size: int = 1
    #: must resolve to 1 for a MoE model (null: the tensor-parallel size, as in megatron-core)
    expert_tensor_parallel_size: int | None = None
    #: the tensor-parallel ranks split the sequence outside attention and MLP (dense models without LoRA);
    #: meaningless at tensor-parallel size 1, as in verl
    sequence_parallel: bool = False
    #: rejected when true (each data-parallel rank keeps its full AdamW state)
    use_distributed_optimizer: bool = False
    #: CUDA: keep the parameters on the CPU between calls
    param_offload: bool = False
    #: gradients are released at every optimizer step (noted on the CPU)
    grad_offload: bool = False
    #: CUDA: keep the optimizer state on the CPU between calls
    optimizer_offload: bool = False
    #: start from the Megatron checkpoint at dist_checkpointing_path instead of converting model.path
    use_dist_checkpointing: bool = False
    #: a directory written by the engine's save (its model/ part, same tensor/pipeline sizes)
    dist_checkpointing_path: str | None = None
    #: seed of megatron-core's CUDA RNG tracker (null: trainer.seed)
    seed: int | None = None
    #: extra megatron-core TransformerConfig fields, passed through (an unknown field is an error naming it)
    override_transformer_config: dict[str, Any] = field(default_factory=dict)
    #: verl's weight converter: accepted, noted by the dry run (rlcore converts with its own)
    use_mbridge: bool = False
    #: verl's weight converter: accepted, noted by the dry run (rlcore converts with its own)
    vanilla_mbridge: bool = False
    #: the compute dtype: the engine computes in float32 (bfloat16/float16: noted on the CPU, an error on CUDA)
    dtype: str = "float32"
    #: rejected when true (Megatron-FSDP is not supported; it needs CUDA)
    use_megatron_fsdp: bool = False


def _target_modules() -> list[str]:
    """verl's default LoRA targets: every linear layer of a transformer block."""
    return ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]


@dataclass(frozen=True)
class MegatronLoRAConfig(Section):
    """``actor_rollout_ref.model.lora``: verl 0.10's LoRA on the Megatron backend (Megatron-Bridge's keys)."""

    PATH = "actor_rollout_ref.model.lora"
    #: only lora (no canonical_lora or DoRA)
    type: str = "lora"
    #: the rollout always receives merged weights; false is noted by the dry run
    merge: bool = False
    #: the adapters' inner dimension; 0: LoRA off
    rank: int = 0
    #: an adapter adds alpha / rank · B·A·x to its layer's output
    alpha: float = 32
    #: dropout on the adapter's input or output, while training only
    dropout: float = 0.0
    #: megatron-core layer names, or fnmatch patterns of whole module names
    target_modules: list[str] = field(default_factory=_target_modules)
    #: names or patterns left without adapters
    exclude_modules: list[str] = field(default_factory=list)
    #: pre (the adapter's input) or post (its output)
    dropout_position: str = "pre"
    #: xavier or kaiming
    lora_A_init_method: str = "xavier"
    #: only zero: the first policy is the base model's
    lora_B_init_method: str = "zero"
    #: rejected when set (no Megatron-Bridge all-to-all)
    a2a_experimental: bool = False
    #: null or float32 (the engine trains in float32)
    dtype: str | None = None
    #: rejected when set (resume from an rlcore checkpoint)
    adapter_path: str | None = None
    #: must stay true (the engine builds text models)
    freeze_vision_model: bool = True
    #: must stay true (the engine builds text models)
    freeze_vision_projection: bool = True
    #: must stay true: the base model is frozen
    freeze_language_model: bool = True
