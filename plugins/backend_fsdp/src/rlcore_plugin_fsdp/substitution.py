"""verl's VeOmni engine as a named substitution: ``model_engine=veomni`` is trained by this FSDP2 engine.

VeOmni (``veomni`` 0.1.12) is not a dependency of rlcore: it pins ``datasets<=2.21`` and, for GPUs,
``torch==2.11+cu130`` with CUDA-only kernels (docs/from-verl.md, "verl's VeOmni and MindSpeed engines"). The config
layer renames the keys of ``<role>.veomni`` whose meaning this engine has (``rlcore.config.aliases``) and keeps its
kernel choices as given; this module writes the plan's substitution line and one note per kept choice. Torch-free.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from rlcore.api import select

#: the roles with a ``veomni`` section
ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")
#: the plan line of the substitution
SUBSTITUTION_LINE = (
    "model_engine=veomni: trained by rlcore's FSDP engine (VeOmni 0.1.12 is not an rlcore dependency: it pins "
    "datasets<=2.21 and torch 2.11+cu130 with CUDA kernels); mapped: veomni.param_offload, optimizer_offload, "
    "fsdp_size, forward_prefetch -> fsdp_config.*, veomni.ulysses_parallel_size -> ulysses_sequence_parallel_size, "
    "veomni.use_torch_compile, entropy_*, router_replay -> the role's own keys, VeOmni's cosine schedule -> "
    "optim.lr_scheduler_type=cosine (min_lr_ratio=0)"
)
#: why a kept key changes nothing in the numbers (key -> reason); the ``*_implementation`` keys share one
WHY: dict[str, str] = {
    "enable_full_shard": "VeOmni 0.1.12 reads it nowhere (its FSDP2 always shards fully, as rlcore's does)",
    "enable_reentrant": "a way to recompute activations (rlcore's gradient checkpointing is enable_gradient_checkpointing)",
    "force_use_huggingface": "rlcore's FSDP engine always builds the Hugging Face model",
    "activation_gpu_limit": "VeOmni's activation offload budget (rlcore's is enable_activation_offload)",
    "basic_modules": "VeOmni's extra FSDP wrap units (rlcore shards every decoder layer)",
    "init_device": "where VeOmni first builds the weights (rlcore's FSDP engine loads them on its own device)",
}
#: the reason of the kernel choices
KERNEL_WHY = "a kernel choice of VeOmni; rlcore's FSDP engine runs the model's own (Hugging Face) kernels"


def veomni_plan_lines(config: DictConfig) -> list[str]:
    """The substitution line when ``model_engine=veomni`` chose the engine (verl's ``<role>.veomni.strategy:
    veomni`` marks it), and a note per kept VeOmni key (with or without it)."""
    chosen = select(config, "actor_rollout_ref.actor.veomni.strategy") == "veomni"
    lines = [SUBSTITUTION_LINE] if chosen else []
    for role in ROLES:
        section: Any = select(config, f"{role}.veomni")
        for key, value in section.items() if isinstance(section, DictConfig) else ():
            name = str(key)
            if name != "strategy":
                why = KERNEL_WHY if name.endswith("_implementation") else WHY[name]
                lines.append(f"{role}.veomni.{name}={value} changes speed, not the numbers: {why}")
    return lines
