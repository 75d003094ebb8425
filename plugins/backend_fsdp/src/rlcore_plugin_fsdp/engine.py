"""The FSDP2 training engine: one Hugging Face model (actor, reference or critic) sharded with ``fully_shard``.

It implements :class:`rlcore.api.training.TrainingEngine`; rlcore's generic workers run the PPO loop,
the rollout engine and the checkpoints around it. Precision, offload and wrapping are in
:mod:`rlcore_plugin_fsdp.fsdp`; model loading and the log-prob/value computations in rlcore's
:mod:`rlcore.modelkit.hf_models` (shared with the DeepSpeed engine), Ulysses sequence parallelism in
:mod:`rlcore.modelkit.sequence_parallel`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed.checkpoint as dcp
from omegaconf import DictConfig
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.tensor import DTensor

from rlcore.api import (
    ActorConfig,
    Batch,
    EngineRequest,
    EngineRole,
    EngineRouting,
    MicroBatchLoss,
    ModelConfig,
    ModelOutput,
    OptimizerState,
    RLCoreError,
    ValueModel,
    activation_offload,
    apply_kernel_switches,
    build_lr_scheduler,
    build_optimizer,
    check_kernel_switches,
    enable_activation_checkpointing,
    engine_routing,
    freeze_vision_tower,
    fused_backend,
    grouper_key,
    hf_model,
    is_vision_language,
    load_pretrained,
    pad_multiple,
    response_outputs,
    response_values,
    rope_owner,
    select,
    sequence_parallel,
)
from rlcore_plugin_fsdp.fsdp import (
    Offloader,
    apply_fsdp2,
    build_device_mesh,
    compute_context,
    compute_dtype,
    enable_full_determinism,
    resolve_fsdp_config,
    warn_without_native_bf16,
)
from rlcore_plugin_fsdp.lora import LoraMerger, apply_lora, lora_settings
from rlcore_plugin_fsdp.models import load_reward_model, response_scores
from rlcore_plugin_fsdp.substitution import check_turbo_config, check_warmup


def full_tensor_item(value: torch.Tensor) -> float:
    """A python float from a (possibly distributed) scalar tensor."""
    if isinstance(value, DTensor):
        value = value.full_tensor()
    return float(value.item())


def check_config(config: DictConfig, role: EngineRole, section: str, model_section: str) -> dict[str, Any]:
    """Validate what the engine of ``role`` reads (``{section}.fsdp_config``, sequence parallelism, the
    GPU-only kernel switches, the actor's LoRA keys, ``model_engine=torchtitan``'s warm-up, FSDP-Turbo's kept keys)
    and return the resolved ``fsdp_config``; errors name the key."""
    model = ModelConfig.from_mapping(select(config, model_section))
    sequence_parallel.check_config(config, role, section)
    check_kernel_switches(config, model, model_section)
    if role == "actor":
        lora_settings(model, model_section)
        if not ActorConfig.from_tree(config).checkpoint.strict:
            raise RLCoreError(
                "actor_rollout_ref.actor.checkpoint.strict=false has no effect on the FSDP engine: it loads the Hugging "
                "Face model with transformers and exports every weight of it (the key acts on the Megatron engine)"
            )
    for problem in (check_warmup(config, section), check_turbo_config(config, section)):
        if problem is not None:
            raise RLCoreError(problem)
    pad_multiple(config, section, model_section)
    return resolve_fsdp_config(select(config, f"{section}.fsdp_config"), f"{section}.fsdp_config")


def full_state_dict(module: nn.Module, options: StateDictOptions) -> dict[str, torch.Tensor]:
    """The gathered model state dict of ``module`` (``options.full_state_dict`` is set): every value is a
    plain tensor then, not a ``DTensor`` or ``ShardedTensor``."""
    return cast("dict[str, torch.Tensor]", get_model_state_dict(module, options=options))


class FSDPEngine(OptimizerState):
    """One model of the run on this rank, sharded over all ranks of the worker group (FSDP2)."""

    #: the sharded model (the actor's, adapters disabled, for a reference engine sharing it)
    module: nn.Module
    offloader: Offloader
    #: the routing of a mixture-of-experts actor or reference model (None otherwise)
    routing: EngineRouting | None

    def __init__(self, request: EngineRequest) -> None:
        """Load the model of ``request.model_section``, shard it and (actor, critic) build AdamW and the LR
        schedule from ``{section}.optim``. With LoRA the reference engine reuses the actor's model with its
        adapters disabled."""
        config, section = request.config, request.section
        self.role = request.role
        self.device = request.device
        self.rank = request.rank
        self.world_size = request.world_size
        self.layout, self.sp = sequence_parallel.from_config(config, section, request.rank, request.world_size)
        self.fsdp = check_config(config, request.role, section, request.model_section)
        if self.fsdp["full_determinism"]:
            enable_full_determinism()
        self.weights_dtype = self.fsdp["model_dtype"]
        self.compute_dtype = compute_dtype(self.fsdp, self.device)
        warn_without_native_bf16(self.fsdp, self.device, f"{section}.fsdp_config")
        self.remove_padding_key = f"{request.model_section}.use_remove_padding"
        self.remove_padding = bool(request.model.use_remove_padding)
        self.pad_multiple = pad_multiple(config, section, request.model_section)
        self.fused = fused_backend(request.model)
        self.prefix_grouper = grouper_key(config, request.role, section)
        self.optimizer: torch.optim.Optimizer | None = None
        self.lr_scheduler: torch.optim.lr_scheduler.LambdaLR | None = None
        self.lora_merger: LoraMerger | None = None
        self.adapters_disabled = False
        self._live: dict[str, torch.Tensor] | None = None
        model_config = request.model
        self.offload_activations = bool(model_config.enable_activation_offload)
        shared = request.share_with
        if request.role == "ref" and isinstance(shared, FSDPEngine) and shared.lora_merger is not None:
            self.module, self.offloader, self.adapters_disabled = shared.module, shared.offloader, True
            self.routing = engine_routing(self.module, config, "ref", section, request.model_section)
            return
        model: nn.Module
        if request.role == "reward_model":
            model = load_reward_model(model_config, request.model_section, self.fsdp["model_dtype"])
        elif request.role == "critic":
            from transformers import AutoModel

            backbone = load_pretrained(AutoModel, model_config, request.model_section, self.fsdp["model_dtype"])
            if is_vision_language(backbone.config):
                raise RLCoreError(f"{request.model_section}.path: a critic of a vision-language model is not supported")
            if model_config.enable_gradient_checkpointing:
                enable_activation_checkpointing(backbone)
            model = ValueModel(backbone)
        else:
            model = load_pretrained(None, model_config, request.model_section, self.fsdp["model_dtype"])
            if request.role == "ref":
                model.requires_grad_(False)
                model.eval()
            elif model_config.enable_gradient_checkpointing:
                enable_activation_checkpointing(model)
        settings = lora_settings(model_config, request.model_section) if request.role == "actor" else None
        if self.sp is not None:
            if rope_owner(model) is not None:
                raise RLCoreError(
                    f"{section}.ulysses_sequence_parallel_size > 1 is not supported for vision-language models"
                )
            sequence_parallel.install(model, self.sp, f"{section}.ulysses_sequence_parallel_size")
        apply_kernel_switches(model, model_config, config, section)
        if settings is not None:
            model = apply_lora(model, settings, request.model_section)
            self.lora_merger = LoraMerger.from_model(model)
        if request.role == "actor" and select(config, f"{section}.freeze_vision_tower", False):
            freeze_vision_tower(model, f"{section}.freeze_vision_tower")
        self.routing = engine_routing(model, config, request.role, section, request.model_section)
        mesh = build_device_mesh(
            self.device, self.world_size, self.fsdp["fsdp_size"], f"{section}.fsdp_config.fsdp_size"
        )
        self.module = apply_fsdp2(model, mesh, self.fsdp, self.device)
        if request.optim is not None:  # a trained role (actor, critic)
            # the optimizer must see the sharded parameters: build it before any forward pass
            trainable = [param for param in self.module.parameters() if param.requires_grad]
            self.optimizer = build_optimizer(trainable, request.optim, f"{section}.optim")
            self.lr_scheduler = build_lr_scheduler(self.optimizer, request.optim, f"{section}.optim")
        self.offloader = Offloader(self.module, self.optimizer, self.fsdp, self.device)
        self.offloader.offload()

    # ------------------------------------------------------------ computing
    def _adapters(self) -> AbstractContextManager[Any]:
        """Disable the LoRA adapters for a reference engine that shares the actor's model."""
        if not self.adapters_disabled:
            return nullcontext()
        from peft import PeftModel

        if not isinstance(self.module, PeftModel):  # adapters_disabled is only set with the actor's peft model
            raise RLCoreError(
                f"a reference engine sharing the actor's model needs its peft model, got {type(self.module)}"
            )
        return self.module.disable_adapter()

    def _output(
        self, micro: Batch, temperature: float, with_entropy: bool, with_sum_pi_squared: bool = False, top_k: int = 0
    ) -> ModelOutput:
        """The forward pass of one micro-batch on the device, in the compute dtype (``cpu_autocast``)."""
        with compute_context(self.fsdp, self.device):
            return self._model_output(micro, temperature, with_entropy, with_sum_pi_squared, top_k)

    def _model_output(
        self, micro: Batch, temperature: float, with_entropy: bool, with_sum_pi_squared: bool, top_k: int
    ) -> ModelOutput:
        """The model's outputs for one micro-batch, by role."""
        if self.role == "reward_model":
            return ModelOutput(scores=response_scores(self.module, micro))
        if self.role == "critic":
            values = response_values(
                self.module,
                micro,
                remove_padding=self.remove_padding,
                remove_padding_key=self.remove_padding_key,
                sp=self.sp,
                pad_multiple=self.pad_multiple,
            )
            return ModelOutput(values=values)
        return response_outputs(
            self.module,
            micro,
            temperature,
            with_entropy=with_entropy,
            with_sum_pi_squared=with_sum_pi_squared,
            top_k=top_k,
            remove_padding=self.remove_padding,
            remove_padding_key=self.remove_padding_key,
            sp=self.sp,
            fused=self.fused,
            prefix_grouper=self.prefix_grouper,
            pad_multiple=self.pad_multiple,
            **(self.routing.forward_kwargs(training=self.module.training) if self.routing is not None else {}),
        )

    def forward(
        self,
        micro_batches: Sequence[Batch],
        *,
        temperature: float,
        with_entropy: bool,
        with_sum_pi_squared: bool = False,
        top_k: int = 0,
    ) -> list[ModelOutput]:
        """Outputs of every micro-batch without gradients (see the contract)."""
        was_training = self.module.training
        self.module.eval()
        try:
            with torch.no_grad(), self._adapters():
                return [
                    self._output(micro.copy_to(self.device), temperature, with_entropy, with_sum_pi_squared, top_k)
                    for micro in micro_batches
                ]
        finally:
            self.module.train(was_training)

    def forward_backward(
        self, micro_batches: Sequence[Batch], loss_fn: MicroBatchLoss, *, temperature: float, with_entropy: bool
    ) -> None:
        """Accumulate the gradients of ``loss_fn`` over ``micro_batches`` (see the contract)."""
        self._trainable("forward_backward")
        self.module.train()
        for index, micro in enumerate(micro_batches):
            micro = micro.copy_to(self.device)
            with activation_offload(self.offload_activations, self.device):
                loss = loss_fn(index, micro, self._output(micro, temperature, with_entropy))
                if self.routing is not None:
                    loss = self.routing.routing.add_aux_loss(loss, len(micro_batches))
            loss.backward()
            if self.routing is not None:
                self.routing.routing.end()

    def optimizer_step(self, grad_clip: float | None) -> float:
        """Clip, step when the gradient norm is finite, zero the gradients; the norm."""
        optimizer = self._trainable("optimizer_step")
        max_norm = float(grad_clip) if grad_clip and grad_clip > 0 else math.inf
        norm = full_tensor_item(torch.nn.utils.clip_grad_norm_(self.module.parameters(), max_norm))
        if math.isfinite(norm):
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return norm

    def all_reduce_sum(self, value: float) -> float:
        """The sum of ``value`` over the data-parallel ranks: over all ranks, divided by the Ulysses group
        size (the ranks of a group hold the same micro-batches)."""
        return sequence_parallel.data_parallel_sum(value, self.world_size, self.device, self.sp)

    def resident(self) -> AbstractContextManager[Any]:
        """Load offloaded parameters and optimizer state for the block (``param_offload``, ``optimizer_offload``)."""
        return self.offloader

    # ------------------------------------------------------------ weights
    def live_weights(self) -> dict[str, torch.Tensor] | None:
        """The actor's own parameter tensors by Hugging Face name (tied aliases included), which training
        updates in place, for a rollout engine in this process to serve without a copy
        (``share_weights``); None unless this is an actor on one CPU rank (not sharded, never offloaded)
        without LoRA adapters."""
        if self.role != "actor" or self.device.type != "cpu" or self.world_size != 1 or self.lora_merger is not None:
            return None
        if self._live is None:  # the same tensors for the engine's life: every update and load is in place
            self._live = full_state_dict(self.module, StateDictOptions(full_state_dict=True))
        return self._live

    def full_weights(self, *, only_rank0: bool = False) -> dict[str, torch.Tensor]:
        """The gathered state dict with Hugging Face names; with LoRA the merged weights ``W + scaling·B·A``
        (computed on new tensors: the training model is not modified)."""
        state = full_state_dict(self.module, StateDictOptions(full_state_dict=True, cpu_offload=only_rank0))
        return self.lora_merger.merge(state) if self.lora_merger is not None else state

    def iter_full_weights(self, *, only_rank0: bool = False) -> Iterator[tuple[str, torch.Tensor]]:
        """The full weights of :meth:`full_weights`, gathered one tensor at a time (for a bucketed weight
        sync: only the tensors the caller still holds take memory), tied aliases left out. Collective: every
        rank must consume the whole iterator; with ``only_rank0`` the tensors are on CPU and the other ranks
        get empty tensors of the right shape and dtype. With LoRA each adapted weight is merged as it is
        gathered, from its base weight and adapter matrices alone (verl's ``layered_summon``)."""
        sharded = cast(
            "dict[str, torch.Tensor]",
            get_model_state_dict(self.module, options=StateDictOptions(full_state_dict=False)),
        )

        def full(value: torch.Tensor) -> torch.Tensor:
            tensor = value.full_tensor() if isinstance(value, DTensor) else value
            if only_rank0 and self.rank != 0:
                return torch.empty(tensor.shape, dtype=tensor.dtype, device="meta")
            return (tensor.cpu() if only_rank0 else tensor).detach()

        seen: set[int] = set()
        distinct: dict[str, torch.Tensor] = {}
        for name, value in sharded.items():
            if id(value) not in seen:  # else a tied alias: the same parameter under a second name
                seen.add(id(value))
                distinct[name] = value
        if self.lora_merger is not None:
            yield from self.lora_merger.merge_stream(distinct, full)
        else:
            yield from ((name, full(value)) for name, value in distinct.items())

    def load_full_weights(self, state: Mapping[str, torch.Tensor]) -> None:
        """Load full Hugging Face weights into the sharded model (not with LoRA adapters)."""
        if self.lora_merger is not None or self.adapters_disabled:
            raise RLCoreError("loading full weights into a LoRA model is not supported: its adapters would be lost")
        set_model_state_dict(self.module, dict(state), options=StateDictOptions(full_state_dict=True))

    # ------------------------------------------------------------ checkpoints
    def save(self, directory: Path, contents: set[str]) -> None:
        """``model/`` and ``optim/``: ``torch.distributed.checkpoint`` directories of the sharded state dicts,
        loadable at another world size."""
        if "model" in contents:
            dcp.save(get_model_state_dict(self.module), checkpoint_id=directory / "model")
        if "optimizer" in contents:
            optimizer = self._trainable("save")
            dcp.save(get_optimizer_state_dict(self.module, optimizer), checkpoint_id=directory / "optim")

    def load(self, directory: Path, contents: set[str]) -> None:
        """Load ``model/`` and ``optim/`` written by :meth:`save` (resharded to this world size)."""
        if "model" in contents:
            state = get_model_state_dict(self.module)
            dcp.load(state, checkpoint_id=directory / "model")
            set_model_state_dict(self.module, state)
        if "optimizer" in contents:
            optimizer = self._trainable("load")
            optim_state = get_optimizer_state_dict(self.module, optimizer)
            dcp.load(optim_state, checkpoint_id=directory / "optim")
            set_optimizer_state_dict(self.module, optimizer, optim_state)

    def save_hf(self, directory: Path, *, with_weights: bool) -> None:
        """The model config and, ``with_weights``, the full (LoRA-merged) weights as a Hugging Face model
        directory, written by rank 0."""
        if self.role in ("critic", "reward_model"):
            raise RLCoreError(f"the {self.role} model has no Hugging Face causal-LM export")
        state = self.full_weights(only_rank0=True) if with_weights else None
        if self.rank != 0:
            return
        model = hf_model(self.module)
        if state is not None:
            model.save_pretrained(directory, state_dict=state)
        else:
            model.config.save_pretrained(directory)

    def close(self) -> None:
        """Nothing to release: the worker owns the process group."""
