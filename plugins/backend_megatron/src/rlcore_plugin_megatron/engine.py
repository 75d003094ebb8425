"""The megatron-core training engine: one model (actor, reference or critic) split over tensor-, pipeline-
and context-parallel ranks, replicated over data-parallel ranks.

It implements :class:`rlcore.api.training.TrainingEngine`. The model is a ``GPTModel`` on megatron-core's
local layer spec (:mod:`rlcore_plugin_megatron.model`), loaded from a Hugging Face checkpoint through
:mod:`rlcore_plugin_megatron.convert`. The layers are split into ``pp × vpp`` model chunks (``vpp`` =
``virtual_pipeline_model_parallel_size``, 1 when null); pipeline rank ``r`` holds chunks ``r, pp + r, …``
(megatron-core's interleaved assignment). Every micro-batch goes through all chunks in order (all forwards,
then all backwards in reverse, with blocking point-to-point sends between the ranks of consecutive chunks)
and the last chunk's outputs are broadcast to every stage. With context parallelism (``cp > 1``) each rank of a
context-parallel group holds ``1/cp`` of every sequence's tokens (:mod:`rlcore_plugin_megatron.context_parallel`)
and the last chunk's outputs are all-gathered over the group. Gradients are summed over the context-parallel
ranks and averaged over the data-parallel group and, for tied
embeddings split over stages, summed between the first and the last stage, before clipping with the global
norm and stepping AdamW. On CPU, :mod:`rlcore_plugin_megatron.cpu_compat` works around megatron-core's two
CUDA assumptions.

A mixture-of-experts model (Qwen3-MoE) runs megatron-core's MoE layers with expert parallelism: each rank of an
expert-parallel group holds ``E / ep`` experts of every layer, tokens reach them through the allgather dispatcher
on the CPU, and an expert's gradient is reduced over the ranks holding the same expert. The routers'
:class:`~rlcore_plugin_megatron.routing.RouterTap` records the routing, measures the load statistics and replays
a batch's ``routed_experts`` (``router_replay.mode`` R2/R3).

With LoRA (``model.lora.rank > 0``) the actor's base weights are frozen and AdamW trains the adapters of
:mod:`rlcore_plugin_megatron.lora`; the full weights it hands out are merged.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, cast

import torch
import torch.distributed as dist
from omegaconf import DictConfig

from rlcore.api import (
    GATHER_IDS,
    REPLAY_MODES,
    ROUTED_EXPERTS,
    ActorConfig,
    Batch,
    EngineRequest,
    EngineRole,
    MicroBatchLoss,
    ModelConfig,
    ModelOutput,
    MtpConfig,
    OptimizerState,
    ParallelLayout,
    RLCoreError,
    add_id_outputs,
    build_lr_scheduler,
    build_optimizer,
    entropy_from_logits,
    logprobs_from_logits,
    select,
    sum_pi_squared_from_logits,
)
from rlcore.api import ROUTER_REPLAY_ACTOR as ACTOR
from rlcore.api import replay_mode as section_replay_mode
from rlcore_plugin_megatron.context_parallel import cp_positions, gather_sequence
from rlcore_plugin_megatron.convert import (
    ModelSpec,
    chunk_layers,
    from_stage,
    hf_to_megatron,
    megatron_to_hf,
    partition_dim,
    to_stage,
    tp_shard,
    tp_unshard,
)
from rlcore_plugin_megatron.cpu_compat import cpu_compat, define_missing_te_gemm, install_rng_tracker
from rlcore_plugin_megatron.dist_checkpoint import load_dist_checkpoint
from rlcore_plugin_megatron.lora import apply_lora, is_adapter, merged_parameters
from rlcore_plugin_megatron.lora_settings import LoraSettings, resolve_lora
from rlcore_plugin_megatron.model import (
    acquire_parallel_state,
    build_stage,
    load_hf_config,
    load_hf_state,
    release_parallel_state,
    transformer_config,
)
from rlcore_plugin_megatron.moe_convert import ep_global_name, ep_shard, expert_of
from rlcore_plugin_megatron.moe_settings import moe_overrides
from rlcore_plugin_megatron.mtp import (
    HF_PREFIX,
    MC_PREFIX,
    mtp_layers_to_build,
    mtp_targets,
    mtp_to_hf,
    mtp_to_megatron,
    read_mtp_weights,
)
from rlcore_plugin_megatron.routing import (
    forget_forwards,
    install_taps,
    routed_experts,
    routing_stats,
    set_targets,
)
from rlcore_plugin_megatron.sequence_parallel import tensor_parallel_partial
from rlcore_plugin_megatron.settings import FLOAT32_NAMES, MegatronSettings, dist_checkpoint_format, resolve_settings

logger = logging.getLogger(__name__)
#: where verl keeps the actor's routing replay mode
REPLAY_MODE_KEY = f"{ACTOR}.router_replay.mode"

#: the most bytes one broadcast of gathered weights carries (weights of a pipeline stage go in buckets)
BUCKET_BYTES = 256 * 2**20


def _is_cpu(config: DictConfig) -> bool:
    """Whether ``trainer.device`` resolves to the CPU."""
    name = str(select(config, "trainer.device", "auto") or "auto").lower()
    return name == "cpu" or (name == "auto" and not torch.cuda.is_available())


def check_config(config: DictConfig, role: EngineRole, section: str, model_section: str) -> MegatronSettings:
    """Validate what the engine of ``role`` reads and return its resolved ``{section}.megatron``; errors name
    the key."""
    if role == "reward_model":
        raise RLCoreError(
            f"{section}.strategy=megatron: the megatron backend has no reward-model engine yet; use "
            f"{section}.strategy=fsdp"
        )
    key = f"{section}.megatron"
    settings = resolve_settings(select(config, key), key)
    moe_overrides(settings, on_cpu=_is_cpu(config))
    mode = replay_mode(config)
    if mode == "R2" and settings.pp > 1:
        raise RLCoreError(
            f"{REPLAY_MODE_KEY}=R2 with {key}.pipeline_model_parallel_size={settings.pp}: recording the routing "
            "needs every MoE layer on one pipeline stage; use R3 (the rollout records it, each stage replays its own "
            "layers) or pipeline_model_parallel_size=1"
        )
    if mode == "R2" and settings.cp > 1:
        raise RLCoreError(
            f"{REPLAY_MODE_KEY}=R2 with {key}.context_parallel_size={settings.cp}: recording the routing needs whole "
            "sequences on a rank; use R3 (the rollout records it) or context_parallel_size=1"
        )
    if select(config, f"{section}.pad_to_length", False):
        raise RLCoreError(
            f"{section}.pad_to_length=true pads packed micro-batches, and rlcore's Megatron engine packs none (it runs "
            "padded [B, T] micro-batches, verl's bshd layout); set it false, or use strategy=fsdp"
        )
    ulysses = select(config, f"{section}.ulysses_sequence_parallel_size", 1)
    if ulysses != 1:
        raise RLCoreError(
            f"{section}.ulysses_sequence_parallel_size={ulysses!r}: the megatron backend does not use Ulysses; "
            f"use {key}.tensor_model_parallel_size instead and leave it at 1"
        )
    model = ModelConfig.from_mapping(select(config, model_section))
    if (model.lora_rank or 0) > 0 or model.lora_adapter_path:
        raise RLCoreError(
            f"{model_section}.lora_rank > 0 and {model_section}.lora_adapter_path configure LoRA on the fsdp backend "
            f"(peft); the megatron backend reads verl 0.10's {model_section}.lora.rank (and lora.alpha, "
            "lora.target_modules, ...)"
        )
    lora = lora_settings(config, role, model_section)
    if settings.sequence_parallel and settings.tp > 1:
        _check_sequence_parallel(config, key, model_section, lora is not None)
    if settings.dtype not in FLOAT32_NAMES and not _is_cpu(config):
        raise RLCoreError(
            f"{key}.dtype={settings.dtype}: rlcore's Megatron engine computes in float32 (no bf16/fp16 mixed "
            f"precision on Megatron yet); set {key}.dtype=float32 or use {section}.strategy=fsdp"
        )
    # on the CPU, param/grad/optimizer offload have nothing to move (the Offloader acts on CUDA only) and the
    # dry run notes it; use_fused_kernels gives the same log-probs through the output layer's logits (a note too)
    if role == "ref":
        actor_key = "actor_rollout_ref.actor.megatron"
        actor = resolve_settings(select(config, actor_key), actor_key)
        if (actor.tp, actor.pp, actor.cp, actor.ep) != (settings.tp, settings.pp, settings.cp, settings.ep):
            raise RLCoreError(
                f"{key} parallel sizes (tp={settings.tp}, pp={settings.pp}, cp={settings.cp}, ep={settings.ep}) must "
                f"equal {actor_key}'s (tp={actor.tp}, pp={actor.pp}, cp={actor.cp}, ep={actor.ep}): the reference "
                "model shares the actor's ranks"
            )
    return settings


def _check_sequence_parallel(config: DictConfig, key: str, model_section: str, lora: bool) -> None:
    """``{key}.sequence_parallel`` with tensor parallelism is implemented for dense models without LoRA; an error
    naming the key otherwise (a MoE model's routing record and padding mask, and LoRA's adapters, take whole
    sequences on every tensor-parallel rank)."""
    model_config = ModelConfig.from_mapping(select(config, model_section))
    moe = ModelSpec.from_hf_config(load_hf_config(model_config, model_section), model_section).is_moe
    if moe or lora:
        what = "LoRA adapters take" if lora else "a mixture-of-experts model's routing record and padding mask take"
        raise RLCoreError(
            f"{key}.sequence_parallel=true with tensor_model_parallel_size>1 is implemented for dense models without "
            f"LoRA: {what} whole sequences on every tensor-parallel rank; set sequence_parallel=false"
        )


def lora_settings(config: DictConfig, role: EngineRole, model_section: str) -> LoraSettings | None:
    """The resolved ``{model_section}.lora`` of the actor (None when off, and for the reference model, which is
    the base model; see :mod:`rlcore_plugin_megatron.lora`); a bad value is an error naming its key."""
    key = f"{model_section}.lora"
    settings = resolve_lora(select(config, key), key)
    return settings if role == "actor" else None


def replay_mode(config: DictConfig) -> str:
    """The actor's ``router_replay.mode`` (:func:`rlcore.config.router_replay.replay_mode`); another value than
    :data:`~rlcore.config.router_replay.REPLAY_MODES` is an error naming the key."""
    mode = section_replay_mode(config, ACTOR)
    if mode not in REPLAY_MODES:
        raise RLCoreError(f"{REPLAY_MODE_KEY}={mode!r}: choose one of {', '.join(REPLAY_MODES)}")
    return mode


@dataclass(frozen=True)
class Prepared:
    """A micro-batch as the model takes it: each row's tokens moved to the front (left padding removed),
    so that positions count 0, 1, 2, … as the batch's ``position_ids`` do and a causal mask suffices.
    With context parallelism the width is padded to a multiple of ``2·cp`` and the tensors hold this rank's
    tokens only (its two chunks, :func:`~rlcore_plugin_megatron.context_parallel.cp_positions`).

    Attributes:
        input_ids: ``[B, T]`` the shifted tokens (``[B, T/cp]`` this rank's).
        position_ids: ``[B, T]`` ``0 … T−1`` (this rank's positions).
        attention_mask: ``[1, 1, T, T]`` True above the diagonal (masked); None with context parallelism,
            whose attention masks by positions itself.
        positions: ``[B, R]`` the shifted positions whose outputs predict the response tokens (global).
        valid: ``[B, T]`` (this rank's ``[B, T/cp]``) True at the shifted row's own tokens, False on padding.
        index: ``[B, W]`` where each shifted column comes from in the batch's ``W`` columns (``W ≤ T``).
        own: with context parallelism, the shifted columns this rank holds (None without).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    positions: torch.Tensor
    valid: torch.Tensor
    index: torch.Tensor
    own: torch.Tensor | None = None

    def shift(self, tensor: torch.Tensor, fill: int) -> torch.Tensor:
        """A ``[B, W, ...]`` tensor laid out as ``input_ids`` moved to the model's layout (this rank's columns;
        ``fill`` on padding)."""
        index = self.index.reshape(*self.index.shape, *([1] * (tensor.dim() - 2))).expand(-1, -1, *tensor.shape[2:])
        shifted = tensor.gather(1, index)
        width = shifted.shape[1]
        padded = self.valid.shape[1] if self.own is None else int(self.own.max()) + 1
        shifted = torch.nn.functional.pad(
            shifted, (0, 0) * (tensor.dim() - 2) + (0, max(padded - width, 0)), value=fill
        )
        if self.own is not None:
            shifted = shifted[:, self.own]
        mask = self.valid.reshape(*self.valid.shape, *([1] * (tensor.dim() - 2)))
        return shifted.masked_fill(~mask, fill)

    def unshift(self, tensor: torch.Tensor, fill: int) -> torch.Tensor:
        """The inverse of :meth:`shift` for a ``[B, T, ...]`` tensor of the whole shifted rows (no context
        parallelism): back to the batch's layout, ``fill`` outside each row's tokens."""
        width = self.index.shape[1]
        out = torch.full((tensor.shape[0], width, *tensor.shape[2:]), fill, dtype=tensor.dtype, device=tensor.device)
        valid = self.valid[:, :width]
        rows = torch.arange(tensor.shape[0], device=tensor.device)[:, None].expand(-1, width)
        out[rows[valid], self.index[valid]] = tensor[:, :width][valid]
        return out


def prepare(micro: Batch, cp_size: int = 1, cp_rank: int = 0, sp_size: int = 1) -> Prepared:
    """:class:`Prepared` inputs of ``micro`` (tensors on its device) for context-parallel rank ``cp_rank`` of
    ``cp_size``; with sequence parallelism over ``sp_size`` tensor-parallel ranks the width (each context-parallel
    rank's part) is padded to a multiple of ``sp_size``.

    Each row's attended tokens must be one contiguous run (left-padded prompt, right-padded response), as
    rollouts produce them; with RoPE only relative positions matter, so shifting a row leaves its outputs
    unchanged. Padding the shifted rows on the right changes no output (attention is causal).
    """
    mask = micro["attention_mask"].bool()
    rows, width = mask.shape
    length = micro["responses"].shape[1]
    arange = torch.arange(width, device=mask.device)
    lead = (~mask).long().cumprod(-1).sum(-1)
    trail = (~mask.flip(-1)).long().cumprod(-1).sum(-1)
    count = mask.sum(-1)
    if bool(((width - lead - trail) != count)[count > 0].any()):
        raise RLCoreError(
            "the megatron backend needs every row's attention_mask to be one run of ones (a left-padded prompt "
            "followed by a right-padded response)"
        )
    index = (arange[None] + lead[:, None]).clamp(max=width - 1)
    positions = (width - length - 1 - lead)[:, None] + arange[None, :length]
    input_ids = micro["input_ids"].gather(1, index)
    positions = positions.clamp(0, width - 1)
    valid = arange[None] < count[:, None]
    multiple = (2 * cp_size if cp_size > 1 else 1) * sp_size
    padded = -(-width // multiple) * multiple
    input_ids = torch.nn.functional.pad(input_ids, (0, padded - width))
    valid = torch.nn.functional.pad(valid, (0, padded - width))
    if cp_size > 1:
        own = cp_positions(padded, cp_size, cp_rank, mask.device)
        return Prepared(
            input_ids=input_ids[:, own],
            position_ids=own[None].expand(rows, -1),
            attention_mask=None,
            positions=positions,
            valid=valid[:, own],
            index=index,
            own=own,
        )
    causal = torch.ones(padded, padded, dtype=torch.bool, device=mask.device).triu(1)
    return Prepared(
        input_ids=input_ids,
        position_ids=torch.arange(padded, device=mask.device)[None].expand(rows, padded),
        attention_mask=causal[None, None],
        positions=positions,
        valid=valid,
        index=index,
    )


def all_reduce_flat(grads: list[torch.Tensor], group: Any, divisor: int = 1) -> None:
    """Sum ``grads`` in place over ``group`` (None: no reduction) in one flat message, then divide by
    ``divisor``."""
    flat = torch.cat([grad.reshape(-1) for grad in grads])
    if group is not None:
        dist.all_reduce(flat, group=group)
    if divisor != 1:
        flat /= divisor
    for grad, part in zip(grads, flat.split([grad.numel() for grad in grads]), strict=True):
        grad.copy_(part.view_as(grad))


class Offloader:
    """Moves the model and/or the optimizer state to the CPU outside :meth:`MegatronEngine.resident` blocks
    (``param_offload``, ``optimizer_offload``; CUDA only: on the CPU there is nothing to move).
    Gradients never outlive a resident block (they are released at every optimizer step), which is what
    ``grad_offload`` asks for."""

    def __init__(
        self,
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None,
        settings: MegatronSettings,
        device: torch.device,
    ) -> None:
        """Remember what to move; :meth:`offload` once after construction starts offloaded."""
        on_cuda = device.type == "cuda"
        self.module, self.optimizer, self.device = module, optimizer, device
        self.params = on_cuda and settings.param_offload
        self.optim = on_cuda and optimizer is not None and settings.optimizer_offload

    def _move_optimizer(self, device: torch.device) -> None:
        """Every tensor of the optimizer state to ``device``."""
        if self.optimizer is None:  # only called with optimizer_offload, which needs an optimizer
            return
        for state in self.optimizer.state.values():
            for name, value in state.items():
                if isinstance(value, torch.Tensor):
                    state[name] = value.to(device, non_blocking=True)

    def offload(self) -> None:
        """Move the offloaded parts to the CPU."""
        if self.params:
            self.module.to("cpu")
        if self.optim:
            self._move_optimizer(torch.device("cpu"))
        if self.params or self.optim:
            torch.cuda.empty_cache()

    def __enter__(self) -> Self:
        """Bring the offloaded parts back to the device for a ``with`` block."""
        if self.params:
            self.module.to(self.device)
        if self.optim:
            self._move_optimizer(self.device)
        return self

    def __exit__(self, *exc: object) -> None:
        """Offload again when the block ends, also after an error."""
        self.offload()


class MegatronEngine(OptimizerState):
    """One model of the run on this rank: a pipeline stage's tensor-parallel shard of a megatron-core
    ``GPTModel`` (see the module docstring)."""

    def __init__(self, request: EngineRequest) -> None:
        """Join (or create) the model-parallel groups, build this rank's stage from ``request.model_section``
        (or from ``megatron.dist_checkpointing_path``) and, for the actor and the critic, AdamW and the LR
        schedule of ``{section}.optim``."""
        from megatron.core import parallel_state as ps

        config, section = request.config, request.section
        self.role = request.role
        self.device = request.device
        self.rank = request.rank
        self.settings = check_config(config, request.role, section, request.model_section)
        self.weights_dtype = self.compute_dtype = torch.float32
        self._closed = False
        acquire_parallel_state(self.settings)
        self.tp_rank, self.pp_rank = ps.get_tensor_model_parallel_rank(), ps.get_pipeline_model_parallel_rank()
        self.tp_group, self.pp_group = ps.get_tensor_model_parallel_group(), ps.get_pipeline_model_parallel_group()
        #: the tensor-parallel ranks that split the sequence (``sequence_parallel``; 1 without)
        self.sp_size = self.settings.tp if self.settings.sequence_parallel and self.settings.tp > 1 else 1
        self.dp_group = ps.get_data_parallel_group()
        self.dp_size = ps.get_data_parallel_world_size()
        #: the context-parallel group and the data-parallel × context-parallel group gradients are reduced over
        self.cp_group, self.cp_rank = ps.get_context_parallel_group(), ps.get_context_parallel_rank()
        self.dp_cp_group = ps.get_data_parallel_group(with_context_parallel=True)
        #: expert parallelism: the group that splits the experts, this rank's place in it, and the group the
        #: experts' gradients are reduced over (the ranks holding the same experts)
        self.ep_group, self.ep_rank = ps.get_expert_model_parallel_group(), ps.get_expert_model_parallel_rank()
        self.edp_group = ps.get_expert_data_parallel_group()
        self.edp_rank = ps.get_expert_data_parallel_rank()
        self.first = self.pp_rank == 0
        self.last = self.pp_rank == self.settings.pp - 1
        self.layout = ParallelLayout(
            ps.get_data_parallel_rank(), self.dp_size, self.tp_rank == 0 and self.cp_rank == 0 and self.last
        )
        if not install_rng_tracker(self.device):
            from megatron.core.tensor_parallel.random import (
                model_parallel_cuda_manual_seed,
            )

            seed = self.settings.seed
            model_parallel_cuda_manual_seed(int(select(config, "trainer.seed", 1)) if seed is None else seed)
        model_config = request.model
        hf_config = load_hf_config(model_config, request.model_section)
        self.hf_config = hf_config
        self.spec = ModelSpec.from_hf_config(hf_config, request.model_section, value_head=request.role == "critic")
        if self.spec.num_query_groups % self.settings.tp:
            raise RLCoreError(
                f"{self.settings.key}.tensor_model_parallel_size={self.settings.tp} must divide the number of key/value "
                f"heads ({self.spec.num_query_groups}) of {request.model_section}.path"
            )
        if self.spec.vocab_size % self.settings.tp:
            raise RLCoreError(
                f"{self.settings.key}.tensor_model_parallel_size={self.settings.tp} must divide the vocabulary size "
                f"({self.spec.vocab_size}) of {request.model_section}.path"
            )
        #: verl's ``model.mtp`` (the policy's model section; off for the critic's, which has none) and the MTP
        #: layers built
        self.mtp: MtpConfig = getattr(model_config, "mtp", None) or MtpConfig()
        self.mtp_layers = mtp_layers_to_build(self.mtp, hf_config, self.settings, is_moe=self.spec.is_moe)
        #: whether the update trains them (``mtp.enable_train``; the reference model never does)
        self.mtp_train = bool(self.mtp_layers and self.mtp.enable_train and request.optim is not None)
        pp, vpp = self.settings.pp, self.settings.vpp
        self.num_chunks = pp * vpp
        #: the global number of each chunk this rank holds, and its global layers
        self.chunk_ids = [c * pp + self.pp_rank for c in range(vpp)]
        self.chunk_layers = chunk_layers(self.spec.num_layers, pp, vpp, self.pp_rank, self.settings.key)
        mc_config = transformer_config(
            self.spec,
            hf_config,
            self.settings,
            self.settings.key,
            self.device,
            gradient_checkpointing=bool(model_config.enable_gradient_checkpointing),
        )
        if self.mtp_layers:
            mc_config = dataclasses.replace(
                mc_config,
                mtp_num_layers=self.mtp_layers,
                mtp_loss_scaling_factor=float(self.mtp.mtp_loss_scaling_factor),
            )
        self.replay_mode = replay_mode(config) if request.section == "actor_rollout_ref.actor" else "disabled"
        self.plan = self._plan_line(mc_config)
        if self.plan:
            logger.info(self.plan)
        if vpp > 1:  # each chunk is a GPTModel of num_layers / vpp layers split over the pp ranks
            mc_config = dataclasses.replace(mc_config, num_layers=self.spec.num_layers // vpp)
        with cpu_compat(self.device):
            self.chunks = [
                build_stage(
                    self.spec,
                    mc_config,
                    hf_config,
                    request.model_section,
                    first=chunk == 0,
                    last=chunk == self.num_chunks - 1,
                    detach_mtp_encoder=bool(self.mtp_layers and self.mtp.detach_encoder),
                )
                for chunk in self.chunk_ids
            ]
        self.module: torch.nn.Module = self.chunks[0] if vpp == 1 else torch.nn.ModuleList(self.chunks)
        self.taps = install_taps(self.chunks, bool(mc_config.moe_router_pre_softmax)) if self.spec.is_moe else []
        #: the global layer of each tap, in order
        self.tap_layers = [layer for layers in self.chunk_layers for layer in layers] if self.taps else []
        if self.spec.is_moe:
            define_missing_te_gemm()
        self.lora = lora_settings(config, request.role, request.model_section)
        if self.lora is not None:  # before loading: a checkpoint of a LoRA run holds the adapters too
            try:
                self._apply_lora(int(select(config, "trainer.seed", 1)))
            except RLCoreError:
                self.close()  # the worker never sees this engine: leave the model-parallel groups now
                raise
        try:
            self._load_initial_weights(config, request)
        except RLCoreError:
            self.close()  # the worker never sees this engine: leave the model-parallel groups now
            raise
        self.module.to(self.device)
        if self.mtp_layers and not self.mtp_train:  # loaded and saved, but not trained (mtp.enable_train=false)
            for name, param in self.module.named_parameters():
                if name.startswith(MC_PREFIX):
                    param.requires_grad_(False)
        self.optimizer: torch.optim.Optimizer | None = None
        self.lr_scheduler: torch.optim.lr_scheduler.LambdaLR | None = None
        if request.optim is None:  # a frozen role (ref)
            self.module.requires_grad_(False)
            self.module.eval()
        else:
            trainable = [param for param in self.module.parameters() if param.requires_grad]
            self.optimizer = build_optimizer(trainable, request.optim, f"{section}.optim")
            self.lr_scheduler = build_lr_scheduler(self.optimizer, request.optim, f"{section}.optim")
        self.offloader = Offloader(self.module, self.optimizer, self.settings, self.device)
        self.offloader.offload()

    def _apply_lora(self, seed: int) -> None:
        """Freeze the model and give the layers ``self.lora`` targets their adapters (logged with the count);
        an error naming the key when a rank gets none."""
        lora = cast("LoraSettings", self.lora)
        adapted = [
            name
            for module, layers in zip(self.chunks, self.chunk_layers, strict=True)
            for name in apply_lora(
                module,
                lora,
                seed=seed,
                layers=layers,
                ep=(self.ep_rank, self.settings.ep),
                num_experts=self.spec.num_experts,
            )
        ]
        fewest = torch.tensor([len(adapted)], device=self.device)
        if dist.is_initialized():
            dist.all_reduce(fewest, op=dist.ReduceOp.MIN)
        if not int(fewest.item()):  # every rank needs something to train (AdamW takes no empty parameter list)
            raise RLCoreError(
                f"{lora.key}.target_modules={list(lora.target_modules)} with exclude_modules="
                f"{list(lora.exclude_modules)} adapts no layer of the model on some rank (each pipeline stage and "
                "expert-parallel rank needs at least one adapted layer)"
            )
        logger.info(
            "megatron LoRA (%s): rank %d, alpha %g, %d adapted layers on this rank (%s ...)",
            lora.key,
            lora.rank,
            lora.alpha,
            len(adapted),
            ", ".join(adapted[:4]),
        )

    def _plan_line(self, mc_config: Any) -> str:
        """What the engine builds for a mixture-of-experts model (empty for a dense one): experts per rank, the
        token dispatcher (and why, on the CPU), what was dropped, the routing replay mode."""
        if not self.spec.is_moe:
            return ""
        overrides = moe_overrides(self.settings, on_cpu=self.device.type == "cpu")
        dispatcher = mc_config.moe_token_dispatcher_type
        if self.device.type == "cpu":
            dispatcher += " (gloo on the CPU: megatron-core's alltoall dispatcher needs CUDA streams)"
        parts = [
            f"megatron MoE ({self.settings.key}): {self.spec.num_experts} experts, top-{self.spec.moe_topk}, "
            f"expert_model_parallel_size={self.settings.ep} ({self.spec.num_experts // self.settings.ep} experts per "
            f"rank), sequential experts, token dispatcher {dispatcher}, load-balancing loss coefficient "
            f"{mc_config.moe_aux_loss_coeff}, routing replay {self.replay_mode}",
            *overrides.notes,
        ]
        return "; ".join(parts)

    # ------------------------------------------------------------ computing
    def _p2p(self, tensor: torch.Tensor, peer_stage: int, send: bool) -> None:
        """Send ``tensor`` to (or receive it in place from) this rank's counterpart on pipeline stage
        ``peer_stage``."""
        peer = dist.get_process_group_ranks(self.pp_group)[peer_stage]
        (dist.send if send else dist.recv)(tensor, peer)

    def _owner(self, chunk: int) -> int:
        """The pipeline rank that holds global model chunk ``chunk``."""
        return chunk % self.settings.pp

    def _chunk_forward(
        self, local: int, inputs: Prepared, hidden_in: torch.Tensor | None, mtp_micro: Batch | None = None
    ) -> torch.Tensor:
        """The forward of this rank's chunk ``local``: logits ``[B, T, V]`` (values ``[B, T, 1]``) of the whole
        sequence (gathered over context-parallel ranks) for the model's last chunk, else hidden states
        ``[T, B, H]`` of this rank's tokens. With ``mtp_micro`` (the update's micro-batch, ``mtp.enable_train``)
        the MTP layers run too and leave their losses in the chunk's ``mtp_losses``."""
        chunk = self.chunks[local]
        if self.chunk_ids[local] != 0:
            chunk.set_input_tensor(hidden_in)
        extra: dict[str, Any] = {"padding_mask": ~inputs.valid} if self.spec.is_moe else {}
        if mtp_micro is not None:
            extra["labels"], extra["loss_mask"] = mtp_targets(
                inputs.input_ids, inputs.positions, mtp_micro["response_mask"]
            )
        out = chunk(
            input_ids=inputs.input_ids,
            position_ids=inputs.position_ids,
            attention_mask=inputs.attention_mask,
            **extra,
        )
        if self.settings.cp > 1 and self.chunk_ids[local] == self.num_chunks - 1:
            out = gather_sequence(out, 1, self.cp_group, sum_grads=False)
        return out

    def _outputs(
        self,
        out: torch.Tensor,
        inputs: Prepared,
        micro: Batch,
        temperature: float,
        with_entropy: bool,
        with_sum_pi_squared: bool = False,
        record: bool = False,
        top_k: int = 0,
    ) -> ModelOutput:
        """Log-probs, entropies and Σπ² (values for a critic) at the response positions of the last stage's
        output (full-vocabulary logits: the output layer gathers the tensor-parallel shards), the log-probs at
        the micro-batch's :data:`GATHER_IDS` and the ``top_k`` most likely ids; a mixture-of-experts model's
        statistics and, ``record``, its routing."""
        index = inputs.positions[..., None].expand(-1, -1, out.shape[-1])
        picked = out.gather(1, index).float()
        if self.spec.value_head:
            return self._with_routing(ModelOutput(values=picked[..., 0]), inputs, record=False)
        logits = picked / temperature
        log_probs = logprobs_from_logits(logits, micro["responses"])
        output = ModelOutput(
            log_probs=log_probs,
            entropy=entropy_from_logits(logits) if with_entropy else None,
            sum_pi_squared=sum_pi_squared_from_logits(logits) if with_sum_pi_squared else None,
        )
        add_id_outputs(output, logits, micro[GATHER_IDS] if GATHER_IDS in micro else None, top_k)
        return self._with_routing(output, inputs, record=record)

    def _set_replay(self, micro: Batch, inputs: Prepared) -> None:
        """Before a micro-batch's forward: the routers of this rank's layers replay their part of its
        ``routed_experts`` (``[B, P + R, L, k]`` over all ``L`` layers, ``-1`` = recompute) when the routing replay
        mode is R2 or R3 and the batch has them, else recompute."""
        if not self.taps:
            return
        routed = None
        if self.replay_mode != "disabled" and ROUTED_EXPERTS in micro:
            given = micro[ROUTED_EXPERTS]
            expected = (*micro["input_ids"].shape, self.spec.num_layers, self.spec.moe_topk)
            if tuple(given.shape) != expected:
                raise RLCoreError(
                    f"batch key {ROUTED_EXPERTS!r} has shape {tuple(given.shape)}; this model needs {expected} "
                    "(rows, tokens, MoE layers, experts per token)"
                )
            # this rank's layers (every layer is a MoE layer; with pipeline stages each stage replays its own)
            routed = inputs.shift(given[:, :, self.tap_layers].to(device=self.device, dtype=torch.long), -1)
        set_targets(self.taps, routed)

    def _with_routing(self, output: ModelOutput, inputs: Prepared, *, record: bool) -> ModelOutput:
        """``output`` with the routers' statistics of the micro-batch (:func:`~rlcore_plugin_megatron.routing.
        routing_stats`) and, ``record``, the experts every token used (``routed_experts``, ``[B, P + R, L, k]``)."""
        if not self.taps:
            return output
        output.stats = routing_stats(self.taps, inputs.valid, self.spec.num_experts)
        if record:
            output.routed_experts = inputs.unshift(routed_experts(self.taps, inputs.valid.shape[0]), -1)
        return output

    def _receive_hidden(self, chunk: int, inputs: Prepared) -> torch.Tensor | None:
        """The ``[T, B, H]`` input hidden states of global chunk ``chunk`` from the rank of the chunk before
        (None for the first chunk)."""
        if chunk == 0:
            return None
        rows, width = inputs.input_ids.shape
        hidden = torch.empty(
            width // self.sp_size, rows, self.spec.hidden_size, dtype=torch.float32, device=self.device
        )
        self._p2p(hidden, self._owner(chunk - 1), send=False)
        return hidden

    def _broadcast_outputs(
        self,
        outputs: list[ModelOutput],
        micros: Sequence[Batch],
        with_entropy: bool,
        with_sum_pi_squared: bool,
        top_k: int,
    ) -> list[ModelOutput]:
        """The last stage's outputs on every stage of the pipeline (the statistics stay on the last stage, whose
        outputs are the ones collected)."""
        if self.settings.pp == 1:
            return outputs
        src = dist.get_process_group_ranks(self.pp_group)[-1]
        result = []
        for index, micro in enumerate(micros):
            # the last stage keeps its own output (with a MoE model's statistics); the others get its tensors
            output = outputs[index] if self.last else ModelOutput()
            for name, shape, dtype in self._broadcast_fields(micro, with_entropy, with_sum_pi_squared, top_k):
                tensor = (
                    getattr(outputs[index], name) if self.last else torch.empty(shape, dtype=dtype, device=self.device)
                )
                tensor = tensor.contiguous()
                dist.broadcast(tensor, src, group=self.pp_group)
                setattr(output, name, tensor)
            result.append(output)
        return result

    def _broadcast_fields(
        self, micro: Batch, with_entropy: bool, with_sum_pi_squared: bool, top_k: int
    ) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
        """``(name, shape, dtype)`` of each output field of ``micro`` the last stage broadcasts."""
        shape = tuple(micro["responses"].shape)
        if self.spec.value_head:
            return [("values", shape, torch.float32)]
        names = ["log_probs"] + ["entropy"] * with_entropy + ["sum_pi_squared"] * with_sum_pi_squared
        fields = [(name, shape, torch.float32) for name in names]
        if GATHER_IDS in micro:
            fields.append(("gathered_log_probs", tuple(micro[GATHER_IDS].shape), torch.float32))
        if top_k:
            fields += [("top_k_ids", (*shape, top_k), torch.int64), ("top_k_log_probs", (*shape, top_k), torch.float32)]
        return fields

    def forward(
        self,
        micro_batches: Sequence[Batch],
        *,
        temperature: float,
        with_entropy: bool,
        with_sum_pi_squared: bool = False,
        top_k: int = 0,
    ) -> list[ModelOutput]:
        """Outputs of every micro-batch without gradients, on every rank (see the contract)."""
        was_training = self.module.training
        self.module.eval()
        outputs: list[ModelOutput] = []
        try:
            with torch.no_grad(), cpu_compat(self.device):
                for micro in micro_batches:
                    micro = micro.copy_to(self.device)
                    inputs = prepare(micro, self.settings.cp, self.cp_rank, self.sp_size)
                    forget_forwards(self.taps)
                    self._set_replay(micro, inputs)
                    for local, chunk in enumerate(self.chunk_ids):
                        out = self._chunk_forward(local, inputs, self._receive_hidden(chunk, inputs))
                        if chunk == self.num_chunks - 1:
                            outputs.append(
                                self._outputs(
                                    out,
                                    inputs,
                                    micro,
                                    temperature,
                                    with_entropy,
                                    with_sum_pi_squared,
                                    record=self.replay_mode == "R2",
                                    top_k=top_k,
                                )
                            )
                        else:
                            self._p2p(out.contiguous(), self._owner(chunk + 1), send=True)
            return self._broadcast_outputs(outputs, micro_batches, with_entropy, with_sum_pi_squared, top_k)
        finally:
            self.module.train(was_training)

    def forward_backward(
        self, micro_batches: Sequence[Batch], loss_fn: MicroBatchLoss, *, temperature: float, with_entropy: bool
    ) -> None:
        """Accumulate the gradients of ``loss_fn`` over ``micro_batches`` (see the contract). With one model
        chunk each micro-batch runs forward and backward in turn; with several (pipeline and virtual stages),
        every micro-batch goes forward through all chunks first, then all backwards run in exactly the
        reverse order; ``loss_fn`` is called where the last chunk is."""
        self._trainable("forward_backward")
        self.module.train()
        last = self.num_chunks - 1
        pending: list[tuple[int, torch.Tensor | None, torch.Tensor]] = []
        if self.spec.is_moe:
            from megatron.core.transformer.moe.moe_utils import MoEAuxLossAutoScaler

            # the load-balancing loss of every micro-batch counts 1/n (the gradients are then averaged over the
            # data-parallel ranks): the mean over micro-batches and ranks of coeff × Σ_layers loss
            MoEAuxLossAutoScaler.set_loss_scale(torch.tensor(1.0 / max(len(micro_batches), 1), device=self.device))
        forget_forwards(self.taps)
        with cpu_compat(self.device):
            for index, micro in enumerate(micro_batches):
                micro = micro.copy_to(self.device)
                inputs = prepare(micro, self.settings.cp, self.cp_rank, self.sp_size)
                self._set_replay(micro, inputs)
                for local, chunk in enumerate(self.chunk_ids):
                    hidden = self._receive_hidden(chunk, inputs)
                    if hidden is not None:
                        hidden.requires_grad_()
                    out = self._chunk_forward(local, inputs, hidden, micro if self.mtp_train else None)
                    if chunk == last:
                        output = self._outputs(out, inputs, micro, temperature, with_entropy)
                        mtp_loss = self._mtp_loss(local, output)
                        out = loss_fn(index, micro, output)
                        if mtp_loss is not None:
                            out = out + mtp_loss / len(micro_batches)
                    else:
                        self._p2p(out.detach().contiguous(), self._owner(chunk + 1), send=True)
                    if self.num_chunks == 1:
                        out.backward()
                    else:
                        pending.append((chunk, hidden, out))
            for chunk, hidden, out in reversed(pending):
                if chunk == last:
                    out.backward()
                else:
                    grad = torch.empty_like(out)
                    self._p2p(grad, self._owner(chunk + 1), send=False)
                    torch.autograd.backward(out, grad)
                if hidden is not None:
                    if hidden.grad is None:
                        raise RLCoreError(f"pipeline chunk {chunk}: no gradient reached the hidden states it received")
                    self._p2p(hidden.grad.contiguous(), self._owner(chunk - 1), send=True)

    def _mtp_loss(self, local: int, output: ModelOutput) -> torch.Tensor | None:
        """The MTP term of the micro-batch chunk ``local`` just ran (``mtp_loss_scaling_factor / layers × Σ`` of the
        MTP layers' losses; None when they did not run); each layer's loss goes into ``output.stats`` as verl's
        ``mtp_losses/mtp_<k>_loss``."""
        losses = getattr(self.chunks[local], "mtp_losses", None)
        if not losses:
            return None
        for depth, loss in enumerate(losses, start=1):
            output.stats[f"mtp_losses/mtp_{depth}_loss"] = float(loss.detach())
        scale = float(self.mtp.mtp_loss_scaling_factor) / len(losses)
        return scale * torch.stack(losses).sum()

    def _chunk_parameters(self) -> list[tuple[int, str, torch.nn.Parameter]]:
        """``(global chunk, chunk-local name, parameter)`` of every parameter this rank holds."""
        return [
            (chunk, name, param)
            for chunk, module in zip(self.chunk_ids, self.chunks, strict=True)
            for name, param in module.named_parameters()
        ]

    def _shared_output_copy(self, chunk: int, name: str) -> bool:
        """Whether ``name`` of global chunk ``chunk`` is the last chunk's copy of a tied embedding (several
        chunks)."""
        return self.spec.tied and self.num_chunks > 1 and chunk == self.num_chunks - 1 and name == "output_layer.weight"

    def _reduce_gradients(self) -> None:
        """Sum the gradients over the context-parallel ranks (each holds its tokens' part), average them over the
        data-parallel group and sum a tied embedding's gradient between the first and the last pipeline stage.
        A replicated weight whose gradient is partial on each tensor-parallel rank (a norm under sequence
        parallelism, the query/key norms: :func:`~rlcore_plugin_megatron.sequence_parallel.tensor_parallel_partial`)
        is first summed over the tensor-parallel group.

        An expert's gradient already holds the part of every token routed to it from the ranks of its
        expert-parallel group; it is summed over the ranks holding the same expert (megatron-core's expert
        data-parallel group) and divided by the data-parallel size like the others."""
        dense: list[torch.Tensor] = []
        experts: list[torch.Tensor] = []
        partial: list[torch.Tensor] = []
        config = self.chunks[0].config
        for name, param in self.module.named_parameters():
            if not param.requires_grad:
                continue
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            (experts if expert_of(name) is not None else dense).append(param.grad)
            if tensor_parallel_partial(name, param, config):
                partial.append(param.grad)
        if partial:
            all_reduce_flat(partial, self.tp_group)
        for grads, group, size in (
            (dense, self.dp_cp_group, self.dp_size * self.settings.cp),
            (experts, self.edp_group, dist.get_world_size(self.edp_group) if experts else 1),
        ):
            if not grads or (size == 1 and self.dp_size == 1):
                continue
            all_reduce_flat(grads, group if size > 1 else None, self.dp_size)
        if self.spec.tied and self.settings.pp > 1:
            from megatron.core import parallel_state as ps

            if ps.is_rank_in_embedding_group():
                module, name = (
                    (self.chunks[0], "embedding.word_embeddings.weight")
                    if self.first
                    else (self.chunks[-1], "output_layer.weight")
                )
                dist.all_reduce(module.get_parameter(name).grad, group=ps.get_embedding_group())

    def _grad_norm(self) -> float:
        """The global gradient norm: every weight counted once over tensor-, pipeline- and expert-parallel
        ranks."""
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        experts = torch.zeros((), dtype=torch.float64, device=self.device)
        for chunk, name, param in self._chunk_parameters():
            if param.grad is None or self._shared_output_copy(chunk, name):
                continue
            if expert_of(name) is not None:
                experts += param.grad.double().pow(2).sum()
                continue
            if partition_dim(name, self.spec) is None and self.tp_rank != 0:
                continue
            total += param.grad.double().pow(2).sum()
        if self.settings.ep > 1:
            dist.all_reduce(experts, group=self.ep_group)
        if self.tp_rank == 0:
            total += experts
        if self.settings.tp * self.settings.pp > 1:
            from megatron.core import parallel_state as ps

            dist.all_reduce(total, group=ps.get_model_parallel_group())
        return float(total.sqrt())

    def optimizer_step(self, grad_clip: float | None) -> float:
        """Reduce the gradients, clip them to ``grad_clip`` by their global norm, step when it is finite,
        zero them; the norm."""
        optimizer = self._trainable("optimizer_step")
        self._reduce_gradients()
        norm = self._grad_norm()
        if math.isfinite(norm):
            if grad_clip and grad_clip > 0:
                coefficient = min(1.0, float(grad_clip) / (norm + 1e-6))
                if coefficient < 1.0:
                    for param in self.module.parameters():
                        if param.grad is not None:
                            param.grad.mul_(coefficient)
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return norm

    def all_reduce_sum(self, value: float) -> float:
        """The sum of ``value`` over the data-parallel ranks."""
        if self.dp_size == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, group=self.dp_group)
        return float(tensor.item())

    def resident(self) -> AbstractContextManager[Any]:
        """Load offloaded parameters and optimizer state for the block (CUDA ``param_offload``,
        ``optimizer_offload``)."""
        return self.offloader

    # ------------------------------------------------------------ weights
    def _gather_stage(self) -> dict[str, torch.Tensor]:
        """This rank's weights (all its chunks) with their tensor-parallel shards joined, under full-model
        names."""
        state: dict[str, torch.Tensor] = {}
        for module, chunk, layers in zip(self.chunks, self.chunk_ids, self.chunk_layers, strict=True):
            chunk_state: dict[str, torch.Tensor] = {}
            for name, tensor in merged_parameters(module):
                if self.settings.tp > 1 and partition_dim(name, self.spec) is not None:
                    shards = [torch.empty_like(tensor) for _ in range(self.settings.tp)]
                    dist.all_gather(shards, tensor.contiguous(), group=self.tp_group)
                    tensor = tp_unshard(name, shards, self.spec)
                if self.settings.ep > 1 and expert_of(name) is not None:
                    shards = [torch.empty_like(tensor) for _ in range(self.settings.ep)]
                    dist.all_gather(shards, tensor.contiguous(), group=self.ep_group)
                    for ep_rank, shard in enumerate(shards):
                        chunk_state[ep_global_name(name, ep_rank, self.settings.ep, self.spec.num_experts)] = shard
                    continue
                chunk_state[name] = tensor
            state.update(from_stage(chunk_state, layers, first=chunk == 0, spec=self.spec))
        return state

    def _gather_pipeline(self, own: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Every stage's weights on every stage, broadcast stage by stage in buckets of at most
        :data:`BUCKET_BYTES`."""
        if self.settings.pp == 1:
            return own
        ranks = dist.get_process_group_ranks(self.pp_group)
        full: dict[str, torch.Tensor] = {}
        for stage, src in enumerate(ranks):
            meta = [[(name, tuple(t.shape)) for name, t in own.items()] if stage == self.pp_rank else None]
            dist.broadcast_object_list(meta, src, group=self.pp_group)
            buckets: list[list[tuple[str, tuple[int, ...]]]] = [[]]
            size = 0
            shapes = cast("list[tuple[str, tuple[int, ...]]]", meta[0])  # the broadcast filled it on every rank
            for name, shape in shapes:
                numel = math.prod(shape)
                if buckets[-1] and (size + numel) * 4 > BUCKET_BYTES:
                    buckets.append([])
                    size = 0
                buckets[-1].append((name, shape))
                size += numel
            for bucket in buckets:
                if stage == self.pp_rank:
                    flat = torch.cat([own[name].reshape(-1).float() for name, _ in bucket])
                else:
                    flat = torch.empty(
                        sum(math.prod(shape) for _, shape in bucket), dtype=torch.float32, device=self.device
                    )
                dist.broadcast(flat, src, group=self.pp_group)
                for (name, shape), part in zip(bucket, flat.split([math.prod(s) for _, s in bucket]), strict=True):
                    full[name] = part.view(shape)
        return full

    def full_weights(self, *, only_rank0: bool = False) -> dict[str, torch.Tensor]:
        """The full weights under Hugging Face names, as transformers' ``state_dict()`` has them (a tied
        model's ``lm_head.weight`` is the embedding, as in the FSDP engine's): tensor-parallel shards and
        experts all-gathered, pipeline stages broadcast in buckets; without the MTP layers, which the rollout's
        model has no place for (:meth:`save_hf` exports them). Collective over all ranks."""
        return self._full_weights(with_mtp=False, only_rank0=only_rank0)

    def _full_weights(self, *, with_mtp: bool, only_rank0: bool) -> dict[str, torch.Tensor]:
        """:meth:`full_weights`, with the MTP layers' weights when ``with_mtp``."""
        state = self._hf_state(with_mtp=with_mtp)
        if self.spec.tied:
            state["lm_head.weight"] = state["model.embed_tokens.weight"]
        if not only_rank0:
            return state
        return {name: t.cpu() for name, t in state.items()} if dist.get_rank() == 0 else {}

    def _to_megatron(self, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A full megatron-core state from Hugging Face weights, the MTP layers' (``model.mtp_layers.*``) among them
        when the model has them (else they are dropped, as verl drops them with ``mtp.enable=false``)."""
        base = {name: t for name, t in state.items() if not name.startswith(HF_PREFIX)}
        out = hf_to_megatron(base, self.spec)
        if self.mtp_layers:
            mtp = {name: t for name, t in state.items() if name.startswith(HF_PREFIX)}
            out.update(mtp_to_megatron(mtp, self.spec, self.mtp_layers))
        return out

    def _hf_state(self, *, with_mtp: bool) -> dict[str, torch.Tensor]:
        """The full weights under Hugging Face names (see :meth:`full_weights`), with the MTP layers' when
        ``with_mtp`` (collective)."""
        gathered = self._gather_pipeline(self._gather_stage())
        state = megatron_to_hf({n: t for n, t in gathered.items() if not n.startswith(MC_PREFIX)}, self.spec)
        if with_mtp and self.mtp_layers:
            mtp = {name: t for name, t in gathered.items() if name.startswith(MC_PREFIX)}
            state.update(mtp_to_hf(mtp, self.spec, self.mtp_layers))
        return state

    def _load_megatron_state(self, state: Mapping[str, torch.Tensor]) -> None:
        """Copy this rank's part of a full megatron-core state (global layer names) into its chunks."""
        for module, chunk, layers in zip(self.chunks, self.chunk_ids, self.chunk_layers, strict=True):
            part = to_stage(state, layers, first=chunk == 0, last=chunk == self.num_chunks - 1, spec=self.spec)
            if self.spec.is_moe:
                part = ep_shard(part, self.ep_rank, self.settings.ep, self.spec.num_experts)
            params = {name: param for name, param in module.named_parameters() if not is_adapter(name)}
            if part.keys() != params.keys():
                raise RLCoreError(
                    f"weights do not match the {self.role} model: missing {sorted(params.keys() - part.keys())}, "
                    f"unexpected {sorted(part.keys() - params.keys())}"
                )
            with torch.no_grad():
                for name, param in params.items():
                    shard = tp_shard(name, part[name], self.tp_rank, self.settings.tp, self.spec)
                    if shard.shape != param.shape:
                        raise RLCoreError(
                            f"weight {name} has shape {tuple(shard.shape)}, the model expects {tuple(param.shape)}"
                        )
                    param.copy_(shard)

    def load_full_weights(self, state: Mapping[str, torch.Tensor]) -> None:
        """Replace the weights by ``state`` (Hugging Face names, full tensors); with LoRA they become the base
        weights and every ``B`` is zeroed, so that the model computes ``state``'s function. The MTP layers keep
        their weights when ``state`` has none (:meth:`full_weights` leaves them out; MTP models are not split, so
        this rank holds them whole)."""
        if self.mtp_layers and not any(name.startswith(HF_PREFIX) for name in state):
            own = {name: p.detach() for name, p in self.module.named_parameters() if name.startswith(MC_PREFIX)}
            state = {**state, **mtp_to_hf(own, self.spec, self.mtp_layers)}
        self._load_megatron_state(self._to_megatron(state))
        with torch.no_grad():
            for name, param in self.module.named_parameters():
                if is_adapter(name) and name.endswith(".B"):
                    param.zero_()

    # ------------------------------------------------------------ checkpoints
    def _shard_name(self) -> str:
        """The file of this rank's tensor/pipeline (and, with expert parallelism, expert-parallel) shard."""
        ep = f"_ep{self.ep_rank:02d}" if self.settings.ep > 1 else ""
        return f"tp{self.tp_rank:02d}_pp{self.pp_rank:02d}{ep}.pt"

    def _shard_header(self) -> dict[str, int]:
        """The layout a shard file was written for (the context-parallel size is recorded when > 1; the shards
        do not depend on it, so a checkpoint loads at any context-parallel size)."""
        header = {"tensor_model_parallel_size": self.settings.tp, "pipeline_model_parallel_size": self.settings.pp}
        if self.settings.vpp > 1:
            header["virtual_pipeline_model_parallel_size"] = self.settings.vpp
        if self.settings.ep > 1:
            header["expert_model_parallel_size"] = self.settings.ep
        if self.settings.cp > 1:
            header["context_parallel_size"] = self.settings.cp
        return header

    def _read_shard(self, file: Path, key: str) -> dict[str, Any]:
        """A shard file written by :meth:`save` for this rank, checked against this layout (``key`` names
        where the path came from)."""
        if not file.is_file():
            raise RLCoreError(f"{key}: no Megatron shard {file}")
        payload = torch.load(file, map_location=self.device, weights_only=True)
        expected = {name: size for name, size in self._shard_header().items() if name != "context_parallel_size"}
        saved = {name: size for name, size in payload["layout"].items() if name != "context_parallel_size"}
        if saved != expected:
            raise RLCoreError(
                f"{key}: {file} was saved with {payload['layout']}, but {self.settings.key} asks for "
                f"{self._shard_header()}; a checkpoint loads with the same tensor, pipeline, virtual pipeline and expert "
                "parallel sizes"
            )
        return payload

    def _load_initial_weights(self, config: DictConfig, request: EngineRequest) -> None:
        """The model's first weights: from ``megatron.dist_checkpointing_path`` with ``use_dist_checkpointing`` (a
        megatron-core distributed checkpoint, or this engine's own ``model/`` shards), else from ``model.path``."""
        # resolve_settings requires the path when use_dist_checkpointing is set
        checkpoint = self.settings.dist_checkpointing_path if self.settings.use_dist_checkpointing else None
        key = f"{self.settings.key}.dist_checkpointing_path"
        if checkpoint is not None and dist_checkpoint_format(Path(checkpoint)) is not None:
            load_dist_checkpoint(self.chunks, Path(checkpoint), key, value_head=self.spec.value_head)
        elif checkpoint is not None:
            self._load_model_files(Path(checkpoint), key)
        else:
            strict = ActorConfig.from_tree(config).checkpoint.strict if request.role in ("actor", "ref") else None
            state = load_hf_state(
                request.model, request.model_section, self.hf_config, strict=strict, unused_ok=HF_PREFIX
            )
            if self.spec.value_head:
                state = {name: t for name, t in state.items() if name != "lm_head.weight"}
            if self.mtp_layers:
                state.update(read_mtp_weights(str(request.model.path), request.model_section))
            self._load_megatron_state(self._to_megatron(state))

    def _load_model_files(self, directory: Path, key: str) -> None:
        """Load this rank's model shard from ``directory/model``."""
        payload = self._read_shard(directory / "model" / self._shard_name(), key)
        self.module.load_state_dict(payload["state"], strict=False)
        names = {name for name, _ in self.module.named_parameters()}
        if not any(is_adapter(name) for name in payload["state"]):  # a base model's shards: the adapters start fresh
            names = {name for name in names if not is_adapter(name)}
        missing = names - payload["state"].keys()
        if missing:
            raise RLCoreError(f"{key}: {directory} lacks {sorted(missing)}")

    def save(self, directory: Path, contents: set[str]) -> None:
        """``model/`` and ``optim/``: one file per tensor/pipeline shard (``tp<t>_pp<p>.pt``; with expert
        parallelism one per expert-parallel rank too, ``tp<t>_pp<p>_ep<e>.pt``), written by data-parallel and
        context-parallel rank 0 (the other data- and context-parallel ranks hold the same state; with expert
        parallelism, by expert-data-parallel rank 0 of each expert-parallel rank)."""
        writer = self.edp_rank == 0 if self.settings.ep > 1 else self.layout.dp_rank == 0 and self.cp_rank == 0
        if not writer:
            return
        parts = {"model": lambda: self.module.state_dict(), "optimizer": lambda: self._trainable("save").state_dict()}
        for part, folder in (("model", "model"), ("optimizer", "optim")):
            if part in contents:
                (directory / folder).mkdir(parents=True, exist_ok=True)
                payload = {"layout": self._shard_header(), "state": parts[part]()}
                torch.save(payload, directory / folder / self._shard_name())

    def load(self, directory: Path, contents: set[str]) -> None:
        """Load what :meth:`save` wrote (any data-parallel size, the same tensor and pipeline sizes)."""
        if "model" in contents:
            self._load_model_files(directory, str(directory))
        if "optimizer" in contents:
            payload = self._read_shard(directory / "optim" / self._shard_name(), str(directory))
            self._trainable("load").load_state_dict(payload["state"])

    def save_hf(self, directory: Path, *, with_weights: bool) -> None:
        """The Hugging Face config and, ``with_weights``, the full weights as ``model.safetensors``, written by
        rank 0: a directory ``AutoModelForCausalLM.from_pretrained`` loads."""
        if self.role == "critic":
            raise RLCoreError("the critic's value model has no Hugging Face causal-LM export")
        state = self._full_weights(with_mtp=True, only_rank0=True) if with_weights else None
        if dist.get_rank() != 0:
            return
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        self.hf_config.save_pretrained(directory)
        if state is not None:
            tied_alias = "lm_head.weight" if self.spec.tied else None  # a checkpoint stores a tied head once
            save_file(
                {name: t.contiguous() for name, t in state.items() if name != tied_alias},
                str(directory / "model.safetensors"),
                metadata={"format": "pt"},
            )

    def close(self) -> None:
        """Release this engine's use of the model-parallel groups (idempotent)."""
        if not self._closed:
            self._closed = True
            release_parallel_state()
