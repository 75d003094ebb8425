"""verl's VeOmni, TorchTitan and FSDP-Turbo engines as named substitutions: ``model_engine=veomni``,
``model_engine=torchtitan`` and ``<role>.strategy=fsdp_turbo`` are trained by this FSDP2 engine.

VeOmni (``veomni`` 0.1.12) is not a dependency of rlcore: it pins ``datasets<=2.21`` and, for GPUs,
``torch==2.11+cu130`` with CUDA-only kernels. TorchTitan (``torchtitan`` 0.3.0) installs and builds its models here,
but its language models cannot train on a CPU: FlexAttention has no CPU backward, its varlen attention calls
flash-attention's CUDA kernel and it refuses SDPA for language models (docs/from-verl.md, "verl's VeOmni, TorchTitan
and MindSpeed engines"). verl's FSDP-Turbo is verl's FSDP engine with the model wrapped in Huawei's FSDPTurbo (FSDP2
plus tensor, expert and Ulysses context-parallel plans; not on the package index): its data-parallel sharding is
this engine's. The config layer renames the keys whose meaning this engine has (``rlcore.config.aliases``) and keeps
the speed choices as given; this module writes the plan's substitution line and one note per kept choice.
Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from rlcore.api import ConfigError, flatten, select

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


def _why_kept(sub: Substitution, key: str) -> str:
    """Why the kept key ``key`` (``<role>.<engine>.<name>``) of ``sub``'s section changes speed and not the numbers;
    a key the config layer should have refused (a hand-made config) is a :class:`~rlcore.api.ConfigError` naming it."""
    name = key.rpartition(".")[2]
    if name.endswith("_implementation") and sub.kernel_why:
        return sub.kernel_why
    if name not in sub.why:
        raise ConfigError(
            f"{key}: not one of the {sub.section} speed choices rlcore's FSDP engine keeps "
            f"({', '.join(sub.why)}{', *_implementation' if sub.kernel_why else ''}): not supported by rlcore"
        )
    return sub.why[name]


def substitution_plan_lines(config: DictConfig) -> list[str]:
    """The substitution line of each engine ``model_engine=`` substituted, and a note per kept key of its section
    (with or without the engine)."""
    lines = [sub.line for sub in SUBSTITUTIONS if _chosen(config, sub)]
    for sub in SUBSTITUTIONS:
        for role in ROLES:
            section: Any = select(config, f"{role}.{sub.section}")
            for key, value in section.items() if isinstance(section, DictConfig) else ():
                if str(key) != "strategy":
                    name = f"{role}.{sub.section}.{str(key)}"
                    lines.append(f"{name}={value} changes speed, not the numbers: {_why_kept(sub, name)}")
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


#: the plan line of ``<role>.strategy=fsdp_turbo``
TURBO_LINE = (
    "strategy=fsdp_turbo: trained by rlcore's FSDP engine (verl's FSDP-Turbo is its FSDP engine with the model "
    "wrapped in Huawei's FSDPTurbo, FSDP2 plus tensor, expert and context-parallel plans for NPUs and CUDA; only its "
    "data-parallel sharding and Ulysses context parallelism mean the same here); mapped: "
    "turbo_config.distributed.fully_shard_parallel_size -> fsdp_config.fsdp_size, ulysses_parallel_size -> "
    "ulysses_sequence_parallel_size, fsdp_plan.param_dtype -> fsdp_config.dtype, fsdp_plan.reduce_dtype -> "
    "fsdp_config.mixed_precision.reduce_dtype"
)
#: why a kept ``turbo_config`` key changes speed and not the numbers (its prefix -> reason)
TURBO_WHY: dict[str, str] = {
    "distributed.fsdp_plan.fsdp_implementation": "FSDPTurbo's FSDP implementation (rlcore's is torch's fully_shard)",
    "distributed.fsdp_plan.num_to_forward_prefetch": "how far FSDPTurbo gathers ahead (rlcore's switch is "
    "fsdp_config.forward_prefetch)",
    "distributed.fsdp_plan.num_to_backward_prefetch": "how far FSDPTurbo gathers ahead in the backward pass",
    "distributed.fsdp_plan.apply_modules": "the modules FSDPTurbo shards as units (rlcore shards every decoder layer)",
    "distributed.fsdp_plan.hook_modules": "the modules whose hooks FSDPTurbo manages to overlap recomputation",
    "memory.recompute_plan": "the modules FSDPTurbo recomputes (rlcore's recomputation is "
    "actor_rollout_ref.model.enable_gradient_checkpointing)",
    "memory.recompute": "activation recomputation (rlcore's is actor_rollout_ref.model.enable_gradient_checkpointing)",
}


def turbo_plan_lines(config: DictConfig) -> list[str]:
    """The substitution line when a role's ``strategy=fsdp_turbo`` chose this engine (verl's own
    ``<role>.fsdp_config.strategy: fsdp_turbo`` marks it), a note per kept ``turbo_config`` key of such a role and one
    per role whose ``turbo_config`` is read nowhere (it did not choose FSDP-Turbo)."""
    chosen = [role for role in ROLES if select(config, f"{role}.fsdp_config.strategy") == "fsdp_turbo"]
    lines = [f"{TURBO_LINE} (for {', '.join(chosen)})"] if chosen else []
    for role in ROLES:
        section: Any = select(config, f"{role}.fsdp_config.turbo_config")
        if not isinstance(section, DictConfig):
            continue
        if role not in chosen:
            lines.append(f"{role}.fsdp_config.turbo_config is read only with {role}.strategy=fsdp_turbo (as in verl)")
            continue
        for key in TURBO_WHY:
            value = select(section, key)
            if value is not None:
                shown = OmegaConf.to_container(value) if isinstance(value, (DictConfig, ListConfig)) else value
                why = TURBO_WHY[key]
                lines.append(f"{role}.fsdp_config.turbo_config.{key}={shown} changes speed, not the numbers: {why}")
    return lines


def check_turbo_config(config: DictConfig, section: str) -> str | None:
    """The problem with ``{section}.fsdp_config.turbo_config`` when the role chose FSDP-Turbo: a key there that is not
    one of the kept speed choices (:data:`TURBO_WHY`; the config layer moved the keys with an equal, and refuses the
    others); None when there is none. Without FSDP-Turbo the section is read nowhere, as in
    verl's FSDP engine."""
    turbo: Any = select(config, f"{section}.fsdp_config.turbo_config")
    if select(config, f"{section}.fsdp_config.strategy") != "fsdp_turbo" or not isinstance(turbo, DictConfig):
        return None
    flat = flatten(OmegaConf.to_container(turbo))
    stray = [k for k in flat if not any(k == kept or k.startswith(kept + ".") for kept in TURBO_WHY)]
    if not stray:
        return None
    names = ", ".join(f"{section}.fsdp_config.turbo_config.{k}" for k in stray)
    return (
        f"{names}: verl's FSDP-Turbo settings that rlcore's FSDP engine (which trains strategy=fsdp_turbo here) has "
        f"no equal for (of turbo_config, it keeps only the speed choices {', '.join(TURBO_WHY)}): not supported by "
        "rlcore yet"
    )
