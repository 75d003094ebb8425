"""What the dry run (and every run's plan) says about the plugin's own keys, read from their typed sections
(:mod:`rlcore_plugin_megatron.config`): notes for Megatron settings that change nothing here, and the problem
of a ``model.lora`` rank on an actor of another backend (the plugin's ``plan_lines`` hook raises it, so the run
stops before anything starts). Torch-free: the hooks module calls it."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from rlcore.api import ActorConfig, ConfigError, ModelConfig, TrainerConfig
from rlcore_plugin_megatron.config import MTP_KEY, MegatronConfig, MegatronLoRAConfig
from rlcore_plugin_megatron.settings import dist_checkpoint_format

#: the sections that hold a ``megatron`` subsection (the plugin's ``config_defaults`` mounts one at each)
MEGATRON_SECTIONS = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")
#: the compute dtypes the engine runs in (any other is noted on the CPU)
FLOAT32 = ("float32", "fp32")


def megatron_notes(config: DictConfig) -> list[str]:
    """Notes for Megatron settings that change nothing here: offloading (``megatron.param_offload``,
    ``grad_offload``, ``optimizer_offload``) and a lower-precision ``megatron.dtype`` on ``trainer.device=cpu``
    (the engine computes in float32 with everything in host memory; on CUDA the dtype is an error), and
    ``use_fused_kernels`` on a Megatron actor (its output layer gives the same log-probs from full logits), and
    ``model.lora.merge=false`` with Megatron LoRA (the rollout gets merged weights either way)."""
    notes = []
    if TrainerConfig.from_tree(config).device == "cpu":
        for section in MEGATRON_SECTIONS:
            key = f"{section}.megatron"
            megatron = MegatronConfig.from_tree(config, key)
            for name in ("param_offload", "grad_offload", "optimizer_offload"):
                if getattr(megatron, name) is True:
                    notes.append(
                        f"{key}.{name}=True changes nothing on trainer.device=cpu: everything is in host memory"
                    )
            if megatron.dtype not in FLOAT32:
                notes.append(
                    f"{key}.dtype={megatron.dtype} changes nothing on trainer.device=cpu: the engine computes in float32"
                )
    if ActorConfig.from_tree(config).strategy != "megatron":
        return notes
    notes += checkpoint_notes(config)
    lora = MegatronLoRAConfig.from_tree(config)
    if isinstance(lora.rank, int) and lora.rank > 0 and lora.merge is False:
        notes.append(
            f"{lora.key('merge')}=False changes nothing in rlcore: the rollout receives merged "
            "weights W + alpha/rank·B·A (its engines take no separate adapters), the same policy as verl's adapters"
        )
    notes += mtp_notes(config)
    if ModelConfig.from_tree(config).use_fused_kernels is True:
        notes.append(
            "actor_rollout_ref.model.use_fused_kernels=True changes nothing on the Megatron backend: its output "
            "layer computes the logits, and the log-probs and entropy from them are the same numbers"
        )
    return notes


def checkpoint_notes(config: DictConfig) -> list[str]:
    """The initial weights of each Megatron role that starts from ``megatron.dist_checkpointing_path`` (checked by
    :func:`rlcore_plugin_megatron.settings.check_checkpoint_folder`): which kind of checkpoint the engine reads."""
    notes = []
    for section in MEGATRON_SECTIONS:
        megatron = MegatronConfig.from_tree(config, f"{section}.megatron")
        if megatron.use_dist_checkpointing and megatron.dist_checkpointing_path:
            path = Path(megatron.dist_checkpointing_path)
            kind = (
                "a megatron-core distributed checkpoint, read by megatron-core's loader"
                if dist_checkpoint_format(path) is not None
                else "a checkpoint of rlcore's Megatron engine (its model/ shards)"
            )
            notes.append(f"{section}.megatron.dist_checkpointing_path: the initial weights, {kind} ({path})")
    return notes


def mtp_notes(config: DictConfig) -> list[str]:
    """Notes for ``actor_rollout_ref.model.mtp`` on a Megatron actor: a split layout the engine builds no MTP layers
    for (it stops at start-up, :func:`rlcore_plugin_megatron.mtp.mtp_layers_to_build`), and the rollout's drafter,
    which keeps the checkpoint's MTP weights (the weight sync sends the policy's weights only)."""
    mtp = ModelConfig.from_tree(config).mtp
    if mtp.enable is not True:
        return []
    notes = []
    key = "actor_rollout_ref.actor.megatron"
    megatron = MegatronConfig.from_tree(config, key)
    split = {
        name: getattr(megatron, name)
        for name in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")
        if getattr(megatron, name) != 1
    }
    if split:
        shown = ", ".join(f"{key}.{name}={size}" for name, size in split.items())
        notes.append(
            f"{MTP_KEY}.enable=True with {shown}: rlcore's Megatron engine builds MTP layers on a model that is not "
            "split (sizes 1; data parallelism is fine), so the run stops when the engine starts"
        )
    if mtp.enable_rollout is True:
        notes.append(
            f"{MTP_KEY}.enable_rollout=True: the rollout drafts with the checkpoint's MTP layers; the weight sync "
            "sends the policy's weights only, so trained MTP layers reach the rollout through a saved Hugging Face "
            "checkpoint (speculative decoding samples from the policy either way)"
        )
    return notes


def megatron_lora_problems(config: DictConfig) -> list[str]:
    """``actor_rollout_ref.model.lora.rank > 0`` (verl 0.10's LoRA on the Megatron backend) with an actor on
    another backend: the FSDP and DeepSpeed backends read ``model.lora_rank`` instead."""
    rank = MegatronLoRAConfig.from_tree(config).rank
    strategy = ActorConfig.from_tree(config).strategy
    if isinstance(rank, int) and rank > 0 and strategy != "megatron":
        return [
            f"actor_rollout_ref.model.lora.rank={rank} configures LoRA on the megatron backend, and "
            f"actor_rollout_ref.actor.strategy={strategy}: set actor_rollout_ref.model.lora_rank instead (or use megatron)"
        ]
    return []


def plan_notes(config: DictConfig) -> list[str]:
    """The plan's ``note:`` lines for the plugin's keys (:func:`megatron_notes`); raises one
    :class:`~rlcore.api.ConfigError` with :func:`megatron_lora_problems` when there are any."""
    problems = megatron_lora_problems(config)
    if problems:
        raise ConfigError(*problems)
    return [f"note: {note}" for note in megatron_notes(config)]
