"""The DeepSpeed training engine: one Hugging Face model (actor, reference or critic) under ZeRO stage 1, 2 or 3.

It implements :class:`rlcore.api.training.TrainingEngine`; rlcore's generic workers run the PPO loop, the
rollout engine and the checkpoints around it. The models, their log-probs and values and Ulysses sequence
parallelism are rlcore's (:mod:`rlcore.modelkit.hf_models`, :mod:`rlcore.modelkit.sequence_parallel`), the
same code the FSDP engine runs; the optimizer is rlcore's AdamW with verl's LR schedule
(:mod:`rlcore.modelkit.optim`), which DeepSpeed wraps in its ZeRO optimizer.

Gradient accumulation and clipping belong to rlcore's PPO loop: DeepSpeed runs with
``managed_gradient_accumulation: false`` (``backward`` accumulates, ``step`` is the boundary) and no
clipping of its own; :meth:`DeepSpeedEngine.optimizer_step` sets the ZeRO optimizer's clip norm for the
step. The model is loaded whole on every rank and partitioned by ``deepspeed.initialize`` (no
``zero.Init``): ZeRO-3 saves memory during training, not while loading.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from omegaconf import DictConfig
from torch import nn

from rlcore.api import (
    DEVICE_KEY,
    Batch,
    EngineRequest,
    EngineRole,
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
    fused_backend,
    grouper_key,
    hf_model,
    load_pretrained,
    pad_multiple,
    resolve_device,
    response_outputs,
    response_values,
    select,
    sequence_parallel,
    weight_buckets,
)
from rlcore_plugin_deepspeed.settings import GATHER_BUCKET_NUMEL, DeepSpeedSettings, deepspeed_json, resolve_settings

#: where :meth:`DeepSpeedEngine.save` puts the full weights and DeepSpeed's own checkpoint
MODEL_FILE, DEEPSPEED_DIR, DEEPSPEED_TAG = "model/model.safetensors", "deepspeed", "state"


def full_numel(tensor: torch.Tensor) -> int:
    """The elements of ``tensor``'s full parameter (``ds_numel`` for a ZeRO-3 partition, else its own)."""
    return int(getattr(tensor, "ds_numel", tensor.numel()))


def check_config(config: DictConfig, role: EngineRole, section: str, model_section: str) -> DeepSpeedSettings:
    """Validate what the engine of ``role`` reads (``{section}.deepspeed_config``, sequence parallelism, the
    kernel switches) and return the resolved settings; errors name the key."""
    if role == "reward_model":
        raise RLCoreError(
            "the deepspeed backend does not run reward models; set reward_model.strategy=fsdp (or another backend)"
        )
    model = ModelConfig.from_mapping(select(config, model_section))
    if (model.lora_rank or 0) > 0 or model.lora_adapter_path:
        raise RLCoreError(
            f"{model_section}.lora_rank > 0 and {model_section}.lora_adapter_path (LoRA) are not supported by the "
            "deepspeed backend; use strategy=fsdp"
        )
    sequence_parallel.check_config(config, role, section)
    check_kernel_switches(config, model, model_section)
    pad_multiple(config, section, model_section)
    device_type = resolve_device(select(config, DEVICE_KEY, "auto")).type
    key = f"{section}.deepspeed_config"
    return resolve_settings(select(config, key), key, device_type)


#: the default process group DeepSpeed's cached groups belong to (see :func:`_prepare_deepspeed`)
_DEEPSPEED_WORLD: list[Any] = []


def _prepare_deepspeed(device: torch.device, rank: int) -> None:
    """Set up DeepSpeed for an engine of this process: ``LOCAL_RANK`` (which ``deepspeed.initialize``
    requires; the CUDA device index, else the rank) unless a launcher set it; no JIT build of the
    shared-memory all-reduce op on CPU (≈ 50 s of compilation for DeepSpeed-inference's all-reduce, which
    training does not use); and DeepSpeed's INFO lines (configuration dumps) out of the run's output."""
    from deepspeed import ops
    from deepspeed.accelerator import get_accelerator
    from deepspeed.utils import logger

    os.environ.setdefault("LOCAL_RANK", str(device.index if device.type == "cuda" else rank))
    if _DEEPSPEED_WORLD and _DEEPSPEED_WORLD[0] is not dist.group.WORLD:
        # the worker group's process group was destroyed and created again (workers of one process in
        # turn): drop DeepSpeed's cached groups of the old one, as deepspeed.comm.destroy_process_group does
        from deepspeed.utils import groups

        groups._release_process_group_references()
    _DEEPSPEED_WORLD[:] = [dist.group.WORLD]
    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is not None:
        ops.__compatible_ops__[builder.NAME] = False
    logger.setLevel(logging.WARNING)


class DeepSpeedEngine(OptimizerState):
    """One model of the run on this rank, wrapped by ``deepspeed.initialize`` over all ranks of the worker
    group (data-parallel ranks × Ulysses sequence-parallel ranks)."""

    def __init__(self, request: EngineRequest) -> None:
        """Load the model of ``request.model_section``, build (actor, critic) AdamW and the LR schedule from
        ``{section}.optim``, and hand both to DeepSpeed with the ZeRO stage of ``{section}.deepspeed_config``."""
        import deepspeed

        _prepare_deepspeed(request.device, request.rank)
        config, section = request.config, request.section
        self.role = request.role
        self.device = request.device
        self.rank = request.rank
        self.world_size = request.world_size
        self.settings = check_config(config, request.role, section, request.model_section)
        self.weights_dtype = self.compute_dtype = self.settings.dtype
        self.layout, self.sp = sequence_parallel.from_config(config, section, request.rank, request.world_size)
        self.remove_padding_key = f"{request.model_section}.use_remove_padding"
        self.remove_padding = bool(request.model.use_remove_padding)
        self.pad_multiple = pad_multiple(config, section, request.model_section)
        self.fused = fused_backend(request.model)
        self.prefix_grouper = grouper_key(config, request.role, section)
        model = self._load_model(request.model, request.model_section)
        self.routing = engine_routing(model, config, request.role, section, request.model_section)
        self.offload_activations = bool(request.model.enable_activation_offload)
        if self.sp is not None:
            sequence_parallel.install(model, self.sp, f"{section}.ulysses_sequence_parallel_size")
        apply_kernel_switches(model, request.model, config, section)
        self.optimizer: torch.optim.Optimizer | None = None
        self.lr_scheduler: torch.optim.lr_scheduler.LambdaLR | None = None
        if request.optim is not None:  # a trained role (actor, critic)
            trainable = [param for param in model.parameters() if param.requires_grad]
            self.optimizer = build_optimizer(trainable, request.optim, f"{section}.optim")
            self.lr_scheduler = build_lr_scheduler(self.optimizer, request.optim, f"{section}.optim")
        self.engine, *_ = deepspeed.initialize(
            model=model,
            optimizer=self.optimizer,
            config=deepspeed_json(self.settings, trainable=self.optimizer is not None),
            dist_init_required=False,
        )
        self.module: nn.Module = self.engine.module
        self.closed = False
        if self.optimizer is not None:
            # bf16 mode skips the finiteness check of the gradient norm; the contract steps only on finite norms
            self.engine.optimizer.check_grad_overflow = True

    def _load_model(self, model_config: ModelConfig, key: str) -> nn.Module:
        """The Hugging Face model of the role in float32 (the master weights; DeepSpeed casts for bf16)."""
        if self.role == "critic":
            from transformers import AutoModel

            backbone = load_pretrained(AutoModel, model_config, key, torch.float32)
            if model_config.enable_gradient_checkpointing:
                enable_activation_checkpointing(backbone)
            return ValueModel(backbone)
        from transformers import AutoModelForCausalLM

        model = load_pretrained(AutoModelForCausalLM, model_config, key, torch.float32)
        if self.role == "ref":
            model.requires_grad_(False)
            model.eval()
        elif model_config.enable_gradient_checkpointing:
            enable_activation_checkpointing(model)
        return model

    # ------------------------------------------------------------ computing
    def _output(self, micro: Batch, temperature: float, with_entropy: bool, top_k: int = 0) -> ModelOutput:
        """The forward pass of one micro-batch on the device, through the DeepSpeed engine (which counts the
        micro-steps that ZeRO-3 accumulates gradients over and hooks its backward into the outputs)."""
        padding, padding_key = self.remove_padding, self.remove_padding_key
        if self.role == "critic":
            return ModelOutput(
                values=response_values(
                    self.engine,
                    micro,
                    sp=self.sp,
                    remove_padding=padding,
                    remove_padding_key=padding_key,
                    pad_multiple=self.pad_multiple,
                )
            )
        return response_outputs(
            self.engine,
            micro,
            temperature,
            with_entropy=with_entropy,
            top_k=top_k,
            sp=self.sp,
            fused=self.fused,
            remove_padding=padding,
            remove_padding_key=padding_key,
            prefix_grouper=self.prefix_grouper,
            pad_multiple=self.pad_multiple,
            **(self.routing.forward_kwargs(training=self.module.training) if self.routing is not None else {}),
        )

    def forward(
        self, micro_batches: Sequence[Batch], *, temperature: float, with_entropy: bool, top_k: int = 0
    ) -> list[ModelOutput]:
        """Outputs of every micro-batch without gradients (see the contract)."""
        was_training = self.module.training
        self.engine.eval()
        try:
            with torch.no_grad():
                return [
                    self._output(micro.copy_to(self.device), temperature, with_entropy, top_k)
                    for micro in micro_batches
                ]
        finally:
            self.engine.train(was_training)

    def forward_backward(
        self, micro_batches: Sequence[Batch], loss_fn: MicroBatchLoss, *, temperature: float, with_entropy: bool
    ) -> None:
        """Accumulate the gradients of ``loss_fn`` over ``micro_batches`` (see the contract); DeepSpeed's
        ``backward`` neither rescales the losses nor ends the accumulation."""
        self._trainable("forward_backward")
        self.engine.train()
        for index, micro in enumerate(micro_batches):
            micro = micro.copy_to(self.device)
            with activation_offload(self.offload_activations, self.device):
                loss = loss_fn(index, micro, self._output(micro, temperature, with_entropy))
                if self.routing is not None:
                    loss = self.routing.routing.add_aux_loss(loss, len(micro_batches))
            self.engine.backward(loss, scale_wrt_gas=False)
            if self.routing is not None:
                self.routing.routing.end()

    def optimizer_step(self, grad_clip: float | None) -> float:
        """Reduce the accumulated gradients, clip them to ``grad_clip`` and step when their norm is finite
        (DeepSpeed's ZeRO optimizer does all three in ``step``); the norm before clipping, ``inf`` when the
        step was skipped."""
        self._trainable("optimizer_step")
        self.engine.optimizer.clip_grad = float(grad_clip) if grad_clip and grad_clip > 0 else 0.0
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return math.nan if norm is None else float(norm)

    def all_reduce_sum(self, value: float) -> float:
        """The sum of ``value`` over the data-parallel ranks: over all ranks, divided by the Ulysses group
        size (the ranks of a group hold the same micro-batches)."""
        return sequence_parallel.data_parallel_sum(value, self.world_size, self.device, self.sp)

    def resident(self) -> AbstractContextManager[Any]:
        """Nothing to move: with ``offload: cpu`` DeepSpeed keeps the offloaded state on the host itself."""
        return nullcontext()

    # ------------------------------------------------------------ weights
    def _named_tensors(self) -> dict[str, torch.Tensor]:
        """The model's parameters and persistent buffers under their state-dict names (tied weights under
        every name they have)."""
        keys = self.module.state_dict(keep_vars=True).keys()
        tensors: dict[str, torch.Tensor] = dict(self.module.named_parameters(remove_duplicate=False))
        tensors.update(self.module.named_buffers(remove_duplicate=False))
        return {name: tensors[name] for name in keys}

    def _buckets(self, named: Mapping[str, torch.Tensor]) -> Iterator[list[tuple[str, torch.Tensor]]]:
        """``named`` in groups of at most :data:`GATHER_BUCKET_NUMEL` elements (by their full size: a ZeRO-3
        partition counts its ``ds_numel``)."""
        return weight_buckets(named.items(), GATHER_BUCKET_NUMEL, full_numel)

    def _gathered(
        self, bucket: list[tuple[str, torch.Tensor]], modifier_rank: int | None
    ) -> AbstractContextManager[Any]:
        """Under ZeRO-3, the full parameters of ``bucket`` for the block (written back from
        ``modifier_rank`` when it is not None); otherwise nothing to gather."""
        if self.settings.zero_stage < 3:
            return nullcontext()
        import deepspeed

        params = [tensor for _, tensor in bucket if hasattr(tensor, "ds_id")]
        return deepspeed.zero.GatheredParameters(params, modifier_rank=modifier_rank)

    def full_weights(self, *, only_rank0: bool = False) -> dict[str, torch.Tensor]:
        """The full weights with Hugging Face names, copied; under ZeRO-3 gathered bucket by bucket
        (:data:`~rlcore_plugin_deepspeed.settings.GATHER_BUCKET_NUMEL` elements at a time)."""
        state: dict[str, torch.Tensor] = {}
        keep = not only_rank0 or self.rank == 0
        for bucket in self._buckets(self._named_tensors()):
            with self._gathered(bucket, modifier_rank=None):
                if keep:
                    for name, tensor in bucket:
                        copy = tensor.detach().clone()
                        state[name] = copy.cpu() if only_rank0 else copy
        return state

    def load_full_weights(self, state: Mapping[str, torch.Tensor]) -> None:
        """Copy full Hugging Face weights into the model and refresh the optimizer's fp32 master weights."""
        named = self._named_tensors()
        missing = sorted(set(named) - set(state))
        if missing:
            raise RLCoreError(f"the weights to load lack {len(missing)} tensors of the model, e.g. {missing[:3]}")
        with torch.no_grad():
            for bucket in self._buckets(named):
                with self._gathered(bucket, modifier_rank=0):
                    for name, tensor in bucket:
                        tensor.copy_(state[name].to(device=tensor.device, dtype=tensor.dtype))
        if self.optimizer is not None:
            self.engine.optimizer.refresh_fp32_params()

    # ------------------------------------------------------------ checkpoints
    def save(self, directory: Path, contents: set[str]) -> None:
        """``model/model.safetensors``: the full weights (rank 0), loadable at any world size;
        ``deepspeed/``: DeepSpeed's checkpoint (module, fp32 master weights and moments of every ZeRO
        partition), loadable at the same number of ranks only."""
        if "model" in contents:
            state = self.full_weights(only_rank0=True)
            if self.rank == 0:
                from safetensors.torch import save_file

                path = directory / MODEL_FILE
                path.parent.mkdir(parents=True, exist_ok=True)
                save_file({name: tensor.contiguous() for name, tensor in state.items()}, str(path))
        if "optimizer" in contents:
            self._trainable("save")
            self.engine.save_checkpoint(str(directory / DEEPSPEED_DIR), tag=DEEPSPEED_TAG, save_latest=False)

    def load(self, directory: Path, contents: set[str]) -> None:
        """Load what :meth:`save` wrote: with ``optimizer`` DeepSpeed's checkpoint (which holds the model
        too), else the full weights of ``model``."""
        if "optimizer" in contents:
            self._trainable("load")
            path = directory / DEEPSPEED_DIR
            try:
                loaded, _ = self.engine.load_checkpoint(
                    str(path), tag=DEEPSPEED_TAG, load_optimizer_states=True, load_lr_scheduler_states=False
                )
            except (RuntimeError, ValueError, AssertionError, KeyError) as exc:
                raise RLCoreError(
                    f"cannot load the DeepSpeed checkpoint {path}: {exc} (ZeRO optimizer state loads only at the "
                    "number of ranks it was saved with; load_contents without optimizer loads the model at any)"
                ) from exc
            if loaded is None:
                raise RLCoreError(f"no DeepSpeed checkpoint under {path}")
        elif "model" in contents:
            from safetensors.torch import load_file

            path = directory / MODEL_FILE
            if not path.is_file():
                raise RLCoreError(f"the checkpoint has no model weights: {path} does not exist")
            self.load_full_weights(load_file(str(path)))

    def save_hf(self, directory: Path, *, with_weights: bool) -> None:
        """The model config and, ``with_weights``, the full weights as a Hugging Face model directory,
        written by rank 0."""
        if self.role == "critic":
            raise RLCoreError("the critic's value model has no Hugging Face causal-LM export")
        state = self.full_weights(only_rank0=True) if with_weights else None
        if self.rank != 0:
            return
        model = hf_model(self.module)
        if state is not None:
            model.save_pretrained(directory, state_dict=state)
        else:
            model.config.save_pretrained(directory)

    def close(self) -> None:
        """Release DeepSpeed's hooks and buffers (idempotent); the worker owns the process group, and once
        another worker of this process has destroyed it there is nothing DeepSpeed can still release."""
        if not self.closed and dist.is_initialized():
            self.engine.destroy()
        self.closed = True
