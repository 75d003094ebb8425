"""What the actor and critic workers share: distributed set-up, model loading, batch-size validation, the
PPO mini/micro-batch update loop and sharded checkpoints."""

from __future__ import annotations

import json
import logging
import math
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.tensor import DTensor

from rlcore.errors import RLCoreError
from rlcore.protocol import Batch
from rlcore_plugin_fsdp.distributed import (
    build_device_mesh,
    init_process_group,
    resolve_device,
    rng_state,
    seed_everything,
    set_rng_state,
)
from rlcore_plugin_fsdp.dynamic_batch import plan_micro_batches

#: what a checkpoint may contain (``checkpoint.save_contents`` / ``load_contents``); ``hf_model`` (a Hugging
#: Face export of the weights) is written by the actor only and never loaded
CHECKPOINT_CONTENTS: tuple[str, ...] = ("model", "optimizer", "extra", "hf_model")
#: the file (written by rank 0) that records a worker checkpoint's world size and contents
CHECKPOINT_MANIFEST = "checkpoint.json"

logger = logging.getLogger(__name__)

LossStep = Callable[[Batch], tuple[torch.Tensor, Mapping[str, float]]]


def extra_state_name(world_size: int, rank: int) -> str:
    """The file name of one rank's extra checkpoint state (LR schedule, generators, RNG states)."""
    return f"extra_state_world_size_{world_size}_rank_{rank}.pt"


def select(config: DictConfig, key: str, default: Any = None) -> Any:
    """``OmegaConf.select`` with a default for missing or null values."""
    value = OmegaConf.select(config, key, default=None)
    return default if value is None else value


def positive_int(value: Any, key: str) -> int:
    """``value`` if it is an int ≥ 1, else an error naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RLCoreError(f"{key} must be a positive integer, got {value!r}")
    return value


def reject_unsupported(config: DictConfig, settings: Iterable[tuple[str, Any]]) -> None:
    """Raise for each ``(key, neutral value)`` whose config value differs: features this backend lacks."""
    for key, neutral in settings:
        value = select(config, key, neutral)
        if value != neutral:
            raise RLCoreError(f"{key}={value!r} is not supported by the fsdp backend yet (use {neutral!r})")


def ppo_batch_sizes(
    config: DictConfig, prefix: str, world_size: int, *, mini_key: str, micro_key: str, legacy_micro_key: str
) -> tuple[int, int]:
    """The per-rank mini-batch and micro-batch sizes, in responses.

    ``mini_key`` counts prompts: the mini-batch holds ``mini × rollout.n`` responses split over the ranks.
    ``micro_key`` counts responses on one rank; when it is null the deprecated global ``legacy_micro_key``
    divided by the ranks is used, else the whole mini-batch (no gradient accumulation).
    """
    n = positive_int(select(config, "actor_rollout_ref.rollout.n", 1), "actor_rollout_ref.rollout.n")
    mini_prompts = positive_int(select(config, f"{prefix}.{mini_key}"), f"{prefix}.{mini_key}")
    responses = mini_prompts * n
    if responses % world_size:
        raise RLCoreError(
            f"{prefix}.{mini_key} ({mini_prompts}) × actor_rollout_ref.rollout.n ({n}) = {responses} responses "
            f"must be divisible by the number of data-parallel ranks ({world_size})"
        )
    mini = responses // world_size
    micro = select(config, f"{prefix}.{micro_key}")
    if micro is None and select(config, f"{prefix}.{legacy_micro_key}") is not None:
        legacy = positive_int(select(config, f"{prefix}.{legacy_micro_key}"), f"{prefix}.{legacy_micro_key}")
        if legacy % world_size:
            raise RLCoreError(
                f"{prefix}.{legacy_micro_key} ({legacy}) must be divisible by the number of ranks ({world_size}); "
                f"or set {prefix}.{micro_key}"
            )
        micro = legacy // world_size
    micro = mini if micro is None else positive_int(micro, f"{prefix}.{micro_key}")
    if mini % micro:
        raise RLCoreError(
            f"the per-rank mini-batch ({prefix}.{mini_key} {mini_prompts} × n {n} / {world_size} ranks = {mini} "
            f"responses) must be divisible by {prefix}.{micro_key} ({micro})"
        )
    return mini, micro


def inference_micro_batch_size(config: DictConfig, prefix: str, world_size: int) -> int | None:
    """``{prefix}.log_prob_micro_batch_size_per_gpu`` (or the deprecated global size ÷ ranks); None = all."""
    per_gpu = select(config, f"{prefix}.log_prob_micro_batch_size_per_gpu")
    if per_gpu is not None:
        return positive_int(per_gpu, f"{prefix}.log_prob_micro_batch_size_per_gpu")
    legacy = select(config, f"{prefix}.log_prob_micro_batch_size")
    if legacy is None:
        return None
    return max(1, positive_int(legacy, f"{prefix}.log_prob_micro_batch_size") // world_size)


def to_device(batch: Batch, device: torch.device) -> Batch:
    """A shallow copy of ``batch`` with its tensors on ``device``; the caller's Batch is left untouched.

    Tensors created under ``torch.inference_mode`` (a rollout's output) are cloned into normal tensors,
    which autograd may use.
    """
    tensors = {key: (t.clone() if t.is_inference() else t).to(device) for key, t in batch.tensors.items()}
    return Batch(tensors, dict(batch.non_tensors), dict(batch.meta))


def token_budget(config: DictConfig, flag_key: str, budget_key: str) -> int | None:
    """The per-micro-batch token budget ``budget_key`` when ``flag_key`` (a ``use_dynamic_bsz`` switch) is
    true, else None (micro-batches of a fixed number of rows)."""
    if not bool(select(config, flag_key, False)):
        return None
    return positive_int(select(config, budget_key), budget_key)


def loss_units(response_mask: torch.Tensor, loss_agg_mode: str) -> float | None:
    """What :func:`rlcore.algos.losses.agg_loss` divides a micro-batch's loss by: its tokens
    (``token-mean``) or its non-empty sequences (``seq-mean-token-sum``, ``seq-mean-token-mean``); None for
    ``seq-mean-token-sum-norm``, whose divisor is a constant."""
    if loss_agg_mode == "token-mean":
        return float(response_mask.sum())
    if loss_agg_mode == "seq-mean-token-sum-norm":
        return None
    return float((response_mask.sum(-1) > 0).sum())


def step_scheduler(scheduler: torch.optim.lr_scheduler.LRScheduler) -> None:
    """Advance ``scheduler`` once; torch's "scheduler before optimizer" warning is expected (and hidden)
    when every optimizer step of the update was skipped for a non-finite gradient."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before")
        scheduler.step()


def full_tensor_item(value: torch.Tensor) -> float:
    """A python float from a (possibly distributed) scalar tensor."""
    if isinstance(value, DTensor):
        value = value.full_tensor()
    return float(value.item())


def load_pretrained(loader: Any, model_config: Mapping[str, Any], key: str, dtype: torch.dtype) -> nn.Module:
    """``loader.from_pretrained`` for the model section at ``key`` (``path``, ``override_config``,
    ``trust_remote_code``); a missing or unloadable path is an error naming ``key.path``."""
    from transformers import AutoConfig

    path = model_config.get("path", None)
    if not path:
        raise RLCoreError(f"{key}.path is not set: give a Hugging Face model directory or hub name")
    trust = bool(model_config.get("trust_remote_code", False))
    try:
        hf_config = AutoConfig.from_pretrained(path, trust_remote_code=trust)
        overrides = model_config.get("override_config", None) or {}
        if isinstance(overrides, DictConfig):
            overrides = OmegaConf.to_container(overrides, resolve=True)
        for name, value in overrides.items():
            setattr(hf_config, name, value)
        return loader.from_pretrained(path, config=hf_config, dtype=dtype, trust_remote_code=trust)
    except (OSError, ValueError) as exc:
        raise RLCoreError(f"{key}.path={path!r} cannot be loaded: {exc}") from exc


def enable_activation_checkpointing(model: nn.Module) -> None:
    """Non-reentrant activation (gradient) checkpointing through the transformers API of this version."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


class FSDPWorkerBase:
    """Process group, device and seeding for one rank; subclasses add models and methods.

    The constructor validates the config and initialises ``torch.distributed`` when nobody has (gloo on CPU,
    nccl on CUDA); :meth:`shutdown` destroys the group again if this worker created it.
    """

    #: roles this worker class accepts
    ROLES: tuple[str, ...] = ()

    def __init__(self, config: DictConfig, role: str, rank: int = 0, world_size: int = 1) -> None:
        """Validate ``role`` and the config (:meth:`configure`), then initialise the process group and seed.

        Nothing is initialised when the config is invalid, so a failed constructor leaves no process group
        behind. Models are built by ``init_model``.
        """
        if role not in self.ROLES:
            raise RLCoreError(f"{type(self).__name__} has no role {role!r}; expected one of {', '.join(self.ROLES)}")
        self.config = config
        self.role = role
        self.rank = rank
        self.world_size = world_size
        self.device = resolve_device(select(config, "trainer.device", "auto"), rank)
        self._owns_process_group = False
        self.configure()
        timeout = float(select(config, "actor_rollout_ref.nccl_timeout", 600))
        self._owns_process_group = init_process_group(rank, world_size, self.device, timeout)
        seed_everything(int(select(config, "trainer.seed", 1)))

    def configure(self) -> None:
        """Read and validate this worker's config sections; runs before any distributed set-up."""
        raise NotImplementedError

    def shutdown(self) -> None:
        """Destroy the process group if this worker created it (idempotent)."""
        if self._owns_process_group and dist.is_initialized():
            dist.destroy_process_group()
        self._owns_process_group = False

    def _mesh(self, fsdp_config: Mapping[str, Any], key: str) -> Any:
        """The device mesh for an ``fsdp_config`` section at ``key``."""
        return build_device_mesh(self.device, self.world_size, fsdp_config["fsdp_size"], f"{key}.fsdp_size")

    def _barrier(self) -> None:
        """Wait for every rank (a no-op for one rank)."""
        if self.world_size > 1:
            dist.barrier()

    def _all_reduce_sum(self, value: float) -> float:
        """The sum of ``value`` over all ranks (``value`` itself for one rank)."""
        if self.world_size == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return float(tensor.item())

    def _ppo_update(
        self,
        batch: Batch,
        *,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        mini_size: int,
        micro_size: int,
        epochs: int,
        grad_clip: float | None,
        generator: torch.Generator | None,
        loss_step: LossStep,
        prefix: str,
        loss_agg_mode: str,
        budget: int | None = None,
        budget_key: str = "",
    ) -> dict[str, float]:
        """Run ``epochs`` passes of mini-batch updates over ``batch`` and return averaged metrics.

        Each mini-batch of ``mini_size`` rows is split into micro-batches of ``micro_size`` rows or, with a
        token ``budget`` (``budget_key``), into token-balanced micro-batches whose count all ranks share.
        Losses are normalised globally: a micro-batch's loss (normalised by its own tokens or sequences, as
        ``loss_agg_mode`` says) is scaled by its share of the mini-batch's tokens or non-empty sequences
        summed over all ranks, times the number of ranks (FSDP averages gradients over them). The
        accumulated gradient is then exactly that of the whole global mini-batch aggregated at once, for
        any micro-batching and any number of ranks (``seq-mean-token-sum-norm`` divides by a constant, so
        its micro-batch losses are simply summed). Gradients are clipped to ``grad_clip``; when their norm
        is not finite the optimizer step is skipped and counted in ``{prefix}/grad_norm_nonfinite``. Rows
        are shuffled once per epoch with ``generator`` when it is given.
        """
        model.train()
        collected: dict[str, list[float]] = defaultdict(list)
        norms: list[float] = []
        skipped = 0
        max_norm = float(grad_clip) if grad_clip and grad_clip > 0 else math.inf
        for _ in range(epochs):
            data = batch.index(torch.randperm(len(batch), generator=generator)) if generator is not None else batch
            for mini in data.split(mini_size):
                optimizer.zero_grad(set_to_none=True)
                plan = plan_micro_batches(
                    mini, size=micro_size, budget=budget, budget_key=budget_key, device=self.device
                )
                units = [loss_units(micro["response_mask"], loss_agg_mode) for micro in plan.parts]
                total = self._all_reduce_sum(sum(unit or 0.0 for unit in units))
                for micro, unit in zip(plan.parts, units, strict=True):
                    loss, metrics = loss_step(micro)
                    share = 1.0 if unit is None else unit / total if total else 0.0
                    (loss * (self.world_size * share)).backward()
                    for name, value in metrics.items():
                        collected[name].append(float(value))
                norm = full_tensor_item(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
                if math.isfinite(norm):
                    optimizer.step()
                    norms.append(norm)
                else:
                    skipped += 1
                optimizer.zero_grad(set_to_none=True)
        out = {name: sum(values) / len(values) for name, values in collected.items()}
        out[f"{prefix}/grad_norm"] = sum(norms) / len(norms) if norms else math.nan
        out[f"{prefix}/grad_norm_nonfinite"] = float(skipped)
        return out

    def _save_state(
        self,
        directory: Path,
        *,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        extra: Mapping[str, Any],
        contents: Iterable[str],
    ) -> None:
        """Write a sharded checkpoint of ``model`` and ``optimizer`` plus this rank's extra state.

        Every rank must call this (``torch.distributed.checkpoint`` saves collectively, each rank writing
        its own shards). Layout under ``directory``:

        - ``model/`` and ``optim/``: DCP checkpoints of the sharded state dicts (loadable at another world
          size); an optimizer without state yet (no step taken) is not saved, because materialising its
          state would change the training that follows;
        - ``extra_state_world_size_<W>_rank_<r>.pt``: ``extra`` (LR schedule, generators) and the RNG states;
        - ``checkpoint.json`` (rank 0): the world size and what was saved.
        """
        contents = set(contents)
        directory.mkdir(parents=True, exist_ok=True)
        has_optimizer_state = bool(optimizer.state)
        if "model" in contents:
            dcp.save(get_model_state_dict(model), checkpoint_id=directory / "model")
        if "optimizer" in contents and has_optimizer_state:
            dcp.save(get_optimizer_state_dict(model, optimizer), checkpoint_id=directory / "optim")
        if "extra" in contents:
            torch.save({**extra, "rng": rng_state()}, directory / extra_state_name(self.world_size, self.rank))
        if self.rank == 0:
            manifest = {
                "world_size": self.world_size,
                "contents": sorted(contents & {"model", "optimizer", "extra"}),
                "optimizer_state": has_optimizer_state,
            }
            (directory / CHECKPOINT_MANIFEST).write_text(json.dumps(manifest, indent=2))
        self._barrier()

    def _load_state(
        self,
        directory: Path,
        *,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        contents: Iterable[str],
        key: str,
    ) -> dict[str, Any] | None:
        """Load what :meth:`_save_state` wrote into the sharded ``model`` and ``optimizer``; restore this
        rank's RNG states and return its extra state (None when ``extra`` is not in ``contents``).

        ``key`` is the config key of ``contents`` (``<section>.checkpoint.load_contents``), named when the
        checkpoint lacks a part it asks for. A checkpoint from another world size loads (DCP reshards);
        its per-rank RNG and generator states then cannot match one to one, which is logged.
        """
        contents = set(contents)
        if not directory.is_dir():
            raise RLCoreError(f"no checkpoint at {directory}: the directory does not exist")
        manifest_file = directory / CHECKPOINT_MANIFEST
        if not manifest_file.is_file():
            raise RLCoreError(f"{directory} is not a complete checkpoint: it has no {CHECKPOINT_MANIFEST}")
        manifest = json.loads(manifest_file.read_text())
        missing = sorted(contents & {"model", "optimizer", "extra"} - set(manifest["contents"]))
        if missing:
            raise RLCoreError(
                f"checkpoint {directory} has no {', '.join(missing)} but {key} asks for it "
                f"(saved: {', '.join(manifest['contents']) or 'nothing'})"
            )
        if "model" in contents:
            state = get_model_state_dict(model)
            dcp.load(state, checkpoint_id=directory / "model")
            set_model_state_dict(model, state)
        if "optimizer" in contents:
            if manifest["optimizer_state"]:
                state = get_optimizer_state_dict(model, optimizer)
                dcp.load(state, checkpoint_id=directory / "optim")
                set_optimizer_state_dict(model, optimizer, state)
            else:
                optimizer.state.clear()
        if "extra" not in contents:
            return None
        saved_world_size = int(manifest["world_size"])
        if saved_world_size != self.world_size and self.rank == 0:
            logger.warning(
                "checkpoint %s was saved by %d ranks and is loaded by %d: model and optimizer are resharded, "
                "but the per-rank RNG and generator states come from rank r mod %d, so sampling will not "
                "repeat the interrupted run exactly", directory, saved_world_size, self.world_size, saved_world_size,
            )
        file = directory / extra_state_name(saved_world_size, self.rank % saved_world_size)
        if not file.is_file():
            raise RLCoreError(f"checkpoint {directory} has no {file.name} ({key} asks for the extra state)")
        extra = torch.load(file, map_location="cpu", weights_only=True)
        set_rng_state(extra.pop("rng"))
        return extra

    @staticmethod
    def _contents(config: DictConfig, prefix: str, which: str) -> list[str]:
        """``{prefix}.checkpoint.{which}`` (default: model, optimizer and extra), validated."""
        contents = list(select(config, f"{prefix}.checkpoint.{which}", CHECKPOINT_CONTENTS[:3]))
        unknown = sorted(set(contents) - set(CHECKPOINT_CONTENTS))
        if unknown:
            raise RLCoreError(
                f"{prefix}.checkpoint.{which} has unknown item(s) {unknown}; allowed: {', '.join(CHECKPOINT_CONTENTS)}"
            )
        return contents
