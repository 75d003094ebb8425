"""verl's VeOmni and TorchTitan engines as named substitutions: ``model_engine=veomni`` and ``model_engine=torchtitan``
are trained by this FSDP2 engine.

VeOmni (``veomni`` 0.1.12) is not a dependency of rlcore: it pins ``datasets<=2.21`` and, for GPUs,
``torch==2.11+cu130`` with CUDA-only kernels. TorchTitan (``torchtitan`` 0.3.0) installs and builds its models here,
but its language models cannot train on a CPU: FlexAttention has no CPU backward, its varlen attention calls
flash-attention's CUDA kernel and it refuses SDPA for language models (docs/from-verl.md, "verl's VeOmni, TorchTitan
and MindSpeed engines"). The config layer renames the keys of ``<role>.veomni`` and ``<role>.torchtitan`` whose
meaning this engine has (``rlcore.config.aliases``) and keeps their speed choices as given; this module writes the
plan's substitution line and one note per kept choice. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from rlcore.api import select

#: the roles with an engine section
ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")


@dataclass(frozen=True)
class Substitution:
    """One verl engine this engine trains: its section's name, the plan line and why each kept key changes speed
    and not the numbers (a key ending in ``_implementation`` shares ``kernel_why``)."""

    section: str
    line: str
    why: dict[str, str]
    kernel_why: str = ""


#: the substituted engines
SUBSTITUTIONS = (
    Substitution(
        "veomni",
        "model_engine=veomni: trained by rlcore's FSDP engine (VeOmni 0.1.12 is not an rlcore dependency: it pins "
        "datasets<=2.21 and torch 2.11+cu130 with CUDA kernels); mapped: veomni.param_offload, optimizer_offload, "
        "fsdp_size, forward_prefetch -> fsdp_config.*, veomni.ulysses_parallel_size -> ulysses_sequence_parallel_size, "
        "veomni.use_torch_compile, entropy_*, router_replay -> the role's own keys, VeOmni's cosine schedule -> "
        "optim.lr_scheduler_type=cosine (min_lr_ratio=0)",
        {
            "enable_full_shard": "VeOmni 0.1.12 reads it nowhere (its FSDP2 always shards fully, as rlcore's does)",
            "enable_reentrant": "a way to recompute activations (rlcore's gradient checkpointing is "
            "enable_gradient_checkpointing)",
            "force_use_huggingface": "rlcore's FSDP engine always builds the Hugging Face model",
            "activation_gpu_limit": "VeOmni's activation offload budget (rlcore's is enable_activation_offload)",
            "basic_modules": "VeOmni's extra FSDP wrap units (rlcore shards every decoder layer)",
            "init_device": "where VeOmni first builds the weights (rlcore's FSDP engine loads them on its own device)",
        },
        "a kernel choice of VeOmni; rlcore's FSDP engine runs the model's own (Hugging Face) kernels",
    ),
    Substitution(
        "torchtitan",
        "model_engine=torchtitan: trained by rlcore's FSDP engine (torchtitan 0.3.0 builds its models here but "
        "cannot train them on a CPU: FlexAttention has no CPU backward, varlen attention needs CUDA); mapped: "
        "torchtitan.param_offload, optimizer_offload, full_determinism -> fsdp_config.*, data_parallel_shard_size -> "
        "fsdp_config.fsdp_size, torchtitan.use_torch_compile, entropy_* -> the role's own keys; optimizer: rlcore's "
        "AdamW at a constant rate, which is verl's TorchTitan optimizer with optim.min_lr_factor=1.0 and no warm-up "
        "(verl's default min_lr_factor=0 decays the rate: a min_lr_factor below 1 or a warm-up is refused)",
        {
            "attn_type": "TorchTitan's attention kernel; rlcore's FSDP engine runs the model's own (Hugging Face) "
            "attention",
            "spmd_backend": "how TorchTitan types its collectives (rlcore's FSDP2 shards with fully_shard)",
            "activation_checkpoint": "a way to recompute activations (rlcore's is "
            "actor_rollout_ref.model.enable_gradient_checkpointing)",
            "reshard_after_forward": "when FSDP frees the gathered weights (rlcore's is "
            "fsdp_config.reshard_after_forward)",
            "max_seq_len": "the length of TorchTitan's RoPE cache (rlcore's model computes RoPE for any length)",
            "forward_prefetch": "verl's TorchTitan engine reads it nowhere",
            "use_orig_params": "verl's TorchTitan engine reads it nowhere",
            "mixed_precision": "verl's TorchTitan engine reads it nowhere",
            "dtype": "verl's TorchTitan engine reads it nowhere",
            "data_parallel_size": "verl's TorchTitan engine reads it nowhere (data_parallel_shard_size sets the "
            "sharding)",
        },
    ),
)


def _chosen(config: DictConfig, substitution: Substitution) -> bool:
    """Whether ``model_engine=<engine>`` chose this engine (verl's ``<role>.<engine>.strategy: <engine>`` marks it)."""
    return select(config, f"actor_rollout_ref.actor.{substitution.section}.strategy") == substitution.section


def substitution_plan_lines(config: DictConfig) -> list[str]:
    """The substitution line of each engine ``model_engine=`` substituted, and a note per kept key of its section
    (with or without the engine)."""
    lines = [sub.line for sub in SUBSTITUTIONS if _chosen(config, sub)]
    for sub in SUBSTITUTIONS:
        for role in ROLES:
            section: Any = select(config, f"{role}.{sub.section}")
            for key, value in section.items() if isinstance(section, DictConfig) else ():
                name = str(key)
                if name != "strategy":
                    why = sub.kernel_why if name.endswith("_implementation") else sub.why[name]
                    lines.append(f"{role}.{sub.section}.{name}={value} changes speed, not the numbers: {why}")
    return lines


def check_warmup(config: DictConfig, section: str) -> str | None:
    """The problem with ``{section}.optim``'s warm-up when ``model_engine=torchtitan`` chose the engine: TorchTitan's
    warm-up multiplies the rate by ``(step + 1) / warmup`` where rlcore's uses ``step / warmup``; None otherwise."""
    torchtitan = next(sub for sub in SUBSTITUTIONS if sub.section == "torchtitan")
    if not _chosen(config, torchtitan) or select(config, f"{section}.optim") is None:
        return None
    steps = select(config, f"{section}.optim.lr_warmup_steps")
    ratio = select(config, f"{section}.optim.lr_warmup_steps_ratio")
    if (steps is not None and steps > 0) or (steps is not None and steps < 0 and ratio):
        return (
            f"{section}.optim.lr_warmup_steps={steps}, lr_warmup_steps_ratio={ratio}: model_engine=torchtitan is "
            "trained by rlcore's FSDP engine, whose warm-up is not TorchTitan's (it ramps the rate by step / warmup, "
            "TorchTitan by (step + 1) / warmup); set no warm-up, or train with model_engine=dp"
        )
    return None
