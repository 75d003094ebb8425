"""The ``megatron`` config sections (verl's key names): defaults, validation and the parallel layout.

Torch-free: the light ``hooks`` module imports it (``rlcore plugins``, config loading and the dry run's
batch arithmetic must not import torch or megatron-core).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlcore.api import RLCoreError
from rlcore_plugin_megatron.config import MegatronConfig

#: every key of a ``megatron`` section and its default (:class:`~rlcore_plugin_megatron.config.MegatronConfig`)
MEGATRON_DEFAULTS: dict[str, Any] = MegatronConfig().tree()
#: ``megatron.dtype`` spellings of the one compute dtype the engine has (verl's default is bfloat16)
FLOAT32_NAMES = ("float32", "fp32")
#: the file that marks a megatron-core distributed checkpoint (its format and version)
DIST_METADATA = "metadata.json"
#: the sharded backend of megatron-core's distributed checkpoints that the engine reads (torch.distributed.checkpoint)
DIST_BACKEND = "torch_dist"
_SIZES = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")
_FLAGS = (
    "sequence_parallel",
    "use_distributed_optimizer",
    "param_offload",
    "grad_offload",
    "optimizer_offload",
    "use_dist_checkpointing",
    "use_mbridge",
    "vanilla_mbridge",
    "use_megatron_fsdp",
)


@dataclass(frozen=True)
class MegatronSettings:
    """One resolved ``{section}.megatron`` section.

    Attributes:
        key: the section's dotted key (``actor_rollout_ref.actor.megatron``), named by errors.
        tp, pp, cp: tensor, pipeline and context parallel sizes (with ``cp = C`` each rank of a context-parallel
            group holds ``1/C`` of every sequence's tokens; see :mod:`rlcore_plugin_megatron.context_parallel`).
        etp: ``expert_tensor_parallel_size`` (None: megatron-core's default, the tensor-parallel size); the
            engine splits no expert over tensor-parallel ranks, so a mixture-of-experts model needs it to resolve to 1.
        ep: expert-parallel size (``expert_model_parallel_size``): each rank of an expert-parallel group holds
            ``E / ep`` of every mixture-of-experts layer's ``E`` experts (a dense model needs 1).
        vpp: model chunks per pipeline rank (``virtual_pipeline_model_parallel_size``; 1 when null): with
            ``pp=P, vpp=V`` the layers are split into ``P × V`` chunks and rank ``r`` holds chunks
            ``r, P + r, 2P + r, …`` (megatron-core's interleaved assignment).
        sequence_parallel: verl's ``sequence_parallel``: the tensor-parallel ranks split the sequence outside
            attention and MLP (:mod:`rlcore_plugin_megatron.sequence_parallel`; nothing at tensor-parallel size 1).
        param_offload, grad_offload, optimizer_offload: CUDA only (see the README).
        use_dist_checkpointing: load the initial weights from ``dist_checkpointing_path`` instead of
            converting ``model.path``.
        dist_checkpointing_path: a megatron-core distributed checkpoint (``torch_dist``, verl's) or a directory
            written by the engine's ``save`` (its ``model/`` part), checked by :func:`check_checkpoint_folder`.
        seed: the seed of megatron-core's CUDA RNG tracker (None: ``trainer.seed``); on the CPU the tracker
            draws nothing (see :mod:`rlcore_plugin_megatron.cpu_compat`).
        override_transformer_config: extra ``TransformerConfig`` fields.
        dtype: verl's compute dtype; the engine computes in float32 (another value: accepted on the CPU with
            a note of the dry run, an error on CUDA). ``use_mbridge``/``vanilla_mbridge`` (verl's weight
            converters; rlcore always converts with :mod:`rlcore_plugin_megatron.convert`) are only noted.
    """

    key: str
    tp: int
    pp: int
    cp: int
    vpp: int
    ep: int
    etp: int | None
    sequence_parallel: bool
    param_offload: bool
    grad_offload: bool
    optimizer_offload: bool
    use_dist_checkpointing: bool
    dist_checkpointing_path: str | None
    seed: int | None
    override_transformer_config: dict[str, Any]
    dtype: str

    @property
    def model_parallel_size(self) -> int:
        """Ranks that hold one copy of the model: ``tp × pp × cp``."""
        return self.tp * self.pp * self.cp


def _size(value: Any, key: str) -> int:
    """A positive integer parallel size; errors name ``key``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RLCoreError(f"{key} must be a positive integer, got {value!r}")
    return value


def resolve_settings(section: Mapping[str, Any] | None, key: str) -> MegatronSettings:
    """The ``megatron`` section at ``key`` merged over :data:`MEGATRON_DEFAULTS` and checked.

    Rejected, each with an error naming the key: unknown keys, virtual pipeline stages without pipeline
    parallelism (``virtual_pipeline_model_parallel_size > 1`` needs ``pipeline_model_parallel_size > 1``), the
    distributed optimizer, and sequence parallelism at tensor-parallel size > 1 (the local layer spec's norms
    cannot shard the sequence, and gloo has no reduce-scatter). The mixture-of-experts fields of
    ``override_transformer_config`` are checked by :func:`rlcore_plugin_megatron.moe_settings.moe_overrides`, and
    ``expert_tensor_parallel_size`` (:attr:`MegatronSettings.etp`) by the engine once it knows the model is one.
    """
    resolved = dict(MEGATRON_DEFAULTS)
    for name, value in (section or {}).items():
        if name not in MEGATRON_DEFAULTS:
            raise RLCoreError(f"unknown key {key}.{name}; known keys: {', '.join(MEGATRON_DEFAULTS)}")
        resolved[name] = value
    sizes = {name: _size(resolved[name], f"{key}.{name}") for name in _SIZES}
    for name in _FLAGS:
        if not isinstance(resolved[name], bool):
            raise RLCoreError(f"{key}.{name} must be true or false, got {resolved[name]!r}")
    vpp_key = f"{key}.virtual_pipeline_model_parallel_size"
    vpp = (
        1
        if resolved["virtual_pipeline_model_parallel_size"] is None
        else _size(resolved["virtual_pipeline_model_parallel_size"], vpp_key)
    )
    if vpp > 1 and sizes["pipeline_model_parallel_size"] == 1:
        raise RLCoreError(
            f"{vpp_key}={vpp} needs {key}.pipeline_model_parallel_size > 1: virtual stages interleave the layers "
            "over pipeline ranks; leave it null without pipeline parallelism"
        )
    ep = _size(resolved["expert_model_parallel_size"], f"{key}.expert_model_parallel_size")
    etp = resolved["expert_tensor_parallel_size"]
    if etp is not None:
        etp = _size(etp, f"{key}.expert_tensor_parallel_size")
    if resolved["use_distributed_optimizer"]:
        raise RLCoreError(
            f"{key}.use_distributed_optimizer=true: sharding the optimizer state over data-parallel ranks is not "
            "implemented by rlcore's Megatron engine (every data-parallel rank keeps its full AdamW state); set false"
        )
    if resolved["use_megatron_fsdp"]:
        raise RLCoreError(
            f"{key}.use_megatron_fsdp=true: Megatron-FSDP (megatron-core's fully sharded data parallelism) is not "
            "supported by rlcore's Megatron engine yet (it averages whole gradients over data-parallel ranks itself; "
            "Megatron-FSDP also needs CUDA: its MegatronFSDP wrapper asks torch.cuda for the current device and "
            "creates CUDA streams even for a CPU model); set false, or use strategy=fsdp to shard over data-parallel "
            "ranks"
        )
    if resolved["dtype"] not in (*FLOAT32_NAMES, "bfloat16", "bf16", "float16", "fp16"):
        raise RLCoreError(f"{key}.dtype must be float32, bfloat16 or float16, got {resolved['dtype']!r}")
    seed = resolved["seed"]
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise RLCoreError(f"{key}.seed must be an integer or null, got {seed!r}")
    path = resolved["dist_checkpointing_path"]
    if resolved["use_dist_checkpointing"] and not path:
        raise RLCoreError(f"{key}.use_dist_checkpointing=true needs {key}.dist_checkpointing_path")
    if resolved["use_dist_checkpointing"]:
        check_checkpoint_folder(Path(str(path)), f"{key}.dist_checkpointing_path")
    overrides = resolved["override_transformer_config"] or {}
    if isinstance(overrides, DictConfig):
        overrides = OmegaConf.to_container(overrides, resolve=True)
    if not isinstance(overrides, Mapping):
        raise RLCoreError(f"{key}.override_transformer_config must be a mapping, got {overrides!r}")
    return MegatronSettings(
        key=key,
        tp=sizes["tensor_model_parallel_size"],
        pp=sizes["pipeline_model_parallel_size"],
        cp=sizes["context_parallel_size"],
        vpp=vpp,
        ep=ep,
        etp=etp,
        sequence_parallel=resolved["sequence_parallel"],
        param_offload=resolved["param_offload"],
        grad_offload=resolved["grad_offload"],
        optimizer_offload=resolved["optimizer_offload"],
        use_dist_checkpointing=resolved["use_dist_checkpointing"],
        dist_checkpointing_path=str(path) if path else None,
        seed=seed,
        override_transformer_config={str(k): v for k, v in dict(overrides).items()},
        dtype=str(resolved["dtype"]),
    )


def dist_checkpoint_format(directory: Path) -> str | None:
    """The sharded backend of the megatron-core distributed checkpoint in ``directory`` (``torch_dist``: what
    megatron-core's ``dist_checkpointing.save`` and verl's converter write), read from the ``metadata.json`` that marks
    one (megatron-core's ``check_is_distributed_checkpoint``); None when ``directory`` holds none."""
    try:
        metadata = json.loads((directory / DIST_METADATA).read_text())
    except (OSError, ValueError):
        return None
    backend = metadata.get("sharded_backend") if isinstance(metadata, dict) else None
    return backend if isinstance(backend, str) else None


def check_checkpoint_folder(directory: Path, key: str) -> None:
    """Raise naming ``key`` and ``directory`` unless it holds a megatron-core distributed checkpoint in the
    ``torch_dist`` format (verl's) or the ``model/`` shards of this engine's own save."""
    backend = dist_checkpoint_format(directory)
    if backend == DIST_BACKEND or (backend is None and (directory / "model").is_dir()):
        return
    if backend is not None:
        raise RLCoreError(
            f"{key}={directory}: a megatron-core distributed checkpoint in the {backend!r} format; rlcore's Megatron "
            f"engine reads {DIST_BACKEND!r} (megatron-core's default, what verl's converter writes)"
        )
    raise RLCoreError(
        f"{key}={directory}: not a megatron-core distributed checkpoint (no readable {DIST_METADATA}, the file "
        "megatron-core's dist_checkpointing.save writes) nor a checkpoint of rlcore's Megatron engine (no model/ "
        "folder)"
    )


def layout_sizes(settings: MegatronSettings, world_size: int) -> int:
    """The data-parallel size ``world_size ÷ (tp × pp × cp)``; an error naming the keys when it does not
    divide."""
    model_parallel = settings.model_parallel_size
    if world_size % model_parallel:
        raise RLCoreError(
            f"{settings.key}.tensor_model_parallel_size ({settings.tp}) × pipeline_model_parallel_size "
            f"({settings.pp}) × context_parallel_size ({settings.cp}) = {model_parallel} must divide the number of "
            f"ranks ({world_size} = trainer.nnodes × trainer.n_gpus_per_node)"
        )
    data_parallel = world_size // model_parallel
    # megatron-core: expert tensor (1) × expert model × pipeline parallel sizes must divide the world, i.e. the
    # expert-parallel size must divide the tensor × context × data-parallel ranks of a pipeline stage
    if (settings.tp * settings.cp * data_parallel) % settings.ep:
        raise RLCoreError(
            f"{settings.key}.expert_model_parallel_size ({settings.ep}) must divide tensor_model_parallel_size "
            f"({settings.tp}) × context_parallel_size ({settings.cp}) × the data-parallel size ({data_parallel}) "
            f"= {settings.tp * settings.cp * data_parallel} (world {world_size} ÷ pipeline_model_parallel_size "
            f"{settings.pp}), as megatron-core requires"
        )
    return data_parallel
