"""verl's MindSpeed and Megatron-Lite engines as named substitutions: ``model_engine=mindspeed`` and
``actor@actor_rollout_ref.actor=mlite_actor`` are trained by this Megatron engine.

MindSpeed is megatron-core patched for Ascend NPUs (``mindspeed``, ``mindspeed_llm``, ``torch_npu``): it does not
run on this machine's CPUs or on CUDA. The config layer renames the keys of ``<role>.mindspeed`` that verl's
Megatron section shares (``rlcore.config.aliases``: ``mindspeed.tensor_model_parallel_size`` ->
``megatron.tensor_model_parallel_size``, ...); its ``mcore_kwargs`` and ``fsdp_kwargs`` (MindSpeed-LLM's layer specs
and kernels) are refused. Megatron-Lite (``megatron.lite`` with verl's ``verl_mlite`` glue: a Megatron-LM branch, not
on the package index, CUDA only) keeps megatron-core's parallel state: the config layer moves the keys of
``<role>.engine`` with the same meaning onto ``<role>.megatron`` (``rlcore.config.mlite``) and keeps its speed
choices, which this module notes; ``impl_cfg.optimizer`` (Megatron-Lite's FSDP2 wrapper or megatron-core's
distributed optimizer, both sharding the optimizer state over data-parallel ranks) is the same as this engine's
unsharded AdamW only when there is one data-parallel rank and, for a mixture-of-experts model, one expert-data-parallel
rank; otherwise it is an error naming the key. This module writes the plan's substitution lines. Torch-free.
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig

from rlcore.api import ConfigError, select
from rlcore_plugin_megatron.settings import layout_sizes, resolve_settings

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


#: the roles Megatron-Lite may train
MLITE_ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")
#: the plan line of the Megatron-Lite substitution (after the role that chose it)
MLITE_LINE = (
    "trained by rlcore's Megatron engine (Megatron-Lite is megatron-core's experimental runtime on a Megatron-LM "
    "branch, verl_mlite: not on the package index, CUDA only); mapped: engine.tp/pp/vpp/cp/ep/etp -> "
    "megatron.*_parallel_size, engine.param/grad/optimizer_offload and dtype -> megatron.*, "
    "engine.impl_cfg.recompute=[full] -> model.enable_gradient_checkpointing (every layer recomputed)"
)
#: the fields of a Hugging Face config that count the routed experts of a mixture-of-experts model
EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts")
#: the speed choices of ``<role>.engine`` kept for a note -> why the numbers stay the same
MLITE_SPEED: dict[str, str] = {
    "attention_backend_override": "the attention kernel changes speed, not the numbers",
    "impl_cfg.use_thd": (
        "Megatron-Lite always packs sequences (THD; false is an error in Megatron-Lite too); rlcore's Megatron engine "
        "computes padded rows with the padding masked: the same log-probs, another speed"
    ),
}


def _world(config: DictConfig) -> int:
    """The training ranks: ``trainer.nnodes × trainer.n_gpus_per_node``."""
    return int(select(config, "trainer.nnodes")) * int(select(config, "trainer.n_gpus_per_node"))


def _has_experts(config: DictConfig) -> bool:
    """Whether the actor's model is a mixture of experts (its ``config.json`` names routed experts); true when the file
    cannot be read, so that the expert-data-parallel ranks are counted."""
    path = Path(str(select(config, "actor_rollout_ref.model.path"))) / "config.json"
    try:
        hf_config = json.loads(path.read_text())
    except (OSError, ValueError):
        return True
    return any(hf_config.get(name) for name in EXPERT_COUNTS)


def _optimizer_line(config: DictConfig, role: str) -> str:
    """The note of ``<role>.engine.impl_cfg.optimizer``; :class:`~rlcore.api.ConfigError` when the optimizer state
    would be sharded over more than one data-parallel (or expert-data-parallel) rank."""
    key = f"{role}.engine.impl_cfg.optimizer"
    value = select(config, key)
    world = _world(config)
    settings = resolve_settings(select(config, f"{role}.megatron"), f"{role}.megatron")
    data = layout_sizes(settings, world)
    expert = world // (settings.pp * settings.ep * (settings.etp or settings.tp)) if _has_experts(config) else 1
    if data > 1 or expert > 1:
        raise ConfigError(
            f"{key}={value}: Megatron-Lite shards the optimizer state over the {data} data-parallel ({expert} "
            "expert-data-parallel) ranks; rlcore's Megatron engine keeps the full AdamW state on every rank and does "
            "not shard it (as with megatron.use_distributed_optimizer=true); use a layout with one data-parallel rank "
            "or strategy=fsdp"
        )
    return (
        f"{key}={value}: one data-parallel and one expert-data-parallel rank, so nothing is sharded: the same as "
        "rlcore's AdamW with its full state on the rank"
    )


def mlite_plan_lines(config: DictConfig) -> list[str]:
    """The substitution line naming the roles that chose Megatron-Lite (verl's ``<role>.engine.strategy: mlite``
    marks them) and a note per speed choice kept in their ``engine`` sections; nothing otherwise."""
    roles = [role for role in MLITE_ROLES if select(config, f"{role}.engine.strategy") == "mlite"]
    if not roles:
        return []
    lines = [f"{', '.join(roles)}: verl's Megatron-Lite engine (engine.strategy=mlite): {MLITE_LINE}"]
    for role in roles:
        for name, why in MLITE_SPEED.items():
            value = select(config, f"{role}.engine.{name}")
            if value is not None:
                lines.append(f"{role}.engine.{name}={value}: {why}")
        if select(config, f"{role}.engine.impl_cfg.optimizer") is not None:
            lines.append(_optimizer_line(config, role))
    return lines
