"""What the planner reads from a resolved run config: the batch arithmetic per rank, the lengths and the
engines' memory settings, gathered once into :class:`PlanSettings` (no torch here)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from omegaconf import DictConfig

from rlcore.api import RLCoreError, select

ARR = "actor_rollout_ref"
#: elements of DeepSpeed's default ``reduce_bucket_size`` (rlcore's DeepSpeed config keeps the default)
DEEPSPEED_REDUCE_BUCKET = 500_000_000
ACTOR = f"{ARR}.actor"
#: bytes per element of the dtype names configs use
DTYPE_BYTES: dict[str, int] = {
    "fp32": 4,
    "float32": 4,
    "float": 4,
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "half": 2,
}


def dtype_bytes(value: Any, key: str) -> int:
    """Bytes per element of the dtype name ``value`` (``bf16``, ``torch.float32`` ...); errors name ``key``."""
    name = str(value).lower().removeprefix("torch.")
    if name not in DTYPE_BYTES:
        raise RLCoreError(f"{key}={value!r} is not a dtype; use one of {', '.join(sorted(DTYPE_BYTES))}")
    return DTYPE_BYTES[name]


@dataclass(frozen=True)
class TrainState:
    """How one training engine (actor, reference or critic) keeps its state on a rank.

    Attributes:
        strategy: ``fsdp``, ``deepspeed`` or ``megatron``.
        shards: ranks the parameters are split over (FSDP's shard group, ZeRO-3's data-parallel ranks,
            Megatron's tensor × pipeline ranks).
        grad_shards: ranks the gradients are split over.
        optim_shards: ranks the optimizer state is split over.
        weight_bytes: bytes per stored parameter (FSDP ``model_dtype``; DeepSpeed's compute dtype; fp32 Megatron).
        grad_bytes: bytes per gradient element.
        optim_bytes: bytes of optimizer state per parameter (AdamW's two moments, plus DeepSpeed's fp32
            master copy in bf16 mode).
        compute_bytes: bytes per activation element (the compute dtype on the device).
        gathered_layers: unsharded decoder layers held at once while computing (FSDP: the current one and the
            prefetched one in the compute dtype, when sharded or cast); 0 when nothing is gathered.
        param_offload: the parameters leave the device between phases (``param_offload``; loaded for the update).
        optimizer_offload: the optimizer state leaves the device between updates (``optimizer_offload``).
        params_on_host: the parameters (and gradients) live in host memory (FSDP ``offload_policy``, ZeRO-3
            with ``offload: cpu``).
        optim_on_host: the optimizer state lives in host memory (FSDP ``offload_policy``, DeepSpeed
            ``offload: cpu``).
        flat_optimizer: the optimizer steps one flat tensor per group (DeepSpeed ZeRO: one step counter).
        fused_projections: the engine keeps q/k/v (and their biases) as one tensor and gate/up as one
            (Megatron), so AdamW keeps fewer step counters.
        bucket_bytes: a gradient-reduction bucket held during the backward pass (DeepSpeed ZeRO-1 and ZeRO-3:
            ``reduce_bucket_size`` = 5e8 elements; measured on one CPU rank).
    """

    strategy: str
    shards: int
    grad_shards: int
    optim_shards: int
    weight_bytes: int
    grad_bytes: int
    optim_bytes: int
    compute_bytes: int
    gathered_layers: int
    param_offload: bool
    optimizer_offload: bool
    params_on_host: bool
    optim_on_host: bool
    flat_optimizer: bool = False
    fused_projections: bool = False
    bucket_bytes: int = 0


@dataclass(frozen=True)
class PlanSettings:
    """The run's quantities that memory and time depend on, per rank."""

    device_type: str  # cuda or cpu: the device the run computes on
    world: int
    dp: int
    ulysses: int
    prompts: int
    n: int
    prompt_len: int
    response_len: int
    mini: int  # responses per mini-batch on one rank
    micro: int  # responses per micro-batch of the update
    update_token_budget: int | None
    log_prob_micro: int | None
    ref_micro: int | None
    log_prob_token_budget: int | None
    gradient_checkpointing: bool
    remove_padding: bool
    activation_offload: bool
    use_reference: bool
    use_critic: bool
    rollout_name: str
    rollout_bytes: int
    rollout_tp: int
    gpu_memory_utilization: float
    max_num_batched_tokens: int | None
    enforce_eager: bool
    free_cache_engine: bool
    ppo_epochs: int
    actor: TrainState
    ref: TrainState | None
    critic: TrainState | None

    @property
    def responses_per_rank(self) -> int:
        """Responses each data-parallel rank trains on per step."""
        return max(1, self.prompts * self.n // self.dp)

    @property
    def rollout_rows(self) -> int:
        """Responses each rollout engine generates per step (an engine spans ``rollout_tp`` ranks; the HF
        engine one)."""
        span = 1 if self.rollout_name == "hf" else max(1, self.rollout_tp)
        return max(1, self.prompts * self.n * span // self.world)

    @property
    def model_parallel(self) -> int:
        """Ranks that share one data-parallel rank's work (Ulysses, tensor, pipeline and context parallel)."""
        return max(1, self.world // self.dp)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data."""
        return asdict(self)


def _flag(config: DictConfig, key: str) -> bool:
    return bool(select(config, key, False))


def train_state(config: DictConfig, section: str, strategy: str, world: int, device_type: str) -> TrainState:
    """The :class:`TrainState` of the engine at ``section`` (``...actor``, ``...ref``, ``critic``)."""
    on_cuda = device_type == "cuda"
    if strategy in ("fsdp", "fsdp2"):
        fsdp = select(config, f"{section}.fsdp_config", {}) or {}
        key = f"{section}.fsdp_config"
        weight = dtype_bytes(fsdp.get("model_dtype", "fp32"), f"{key}.model_dtype")
        compute = dtype_bytes(fsdp.get("dtype", "bf16"), f"{key}.dtype")
        if not on_cuda and not fsdp.get("cpu_autocast", False):
            compute = weight
        size = int(fsdp.get("fsdp_size", -1))
        shards = world if size <= 0 or size >= world else size
        cast = on_cuda and compute != weight
        policy = on_cuda and bool(fsdp.get("offload_policy", False))
        return TrainState(
            strategy="fsdp",
            shards=shards,
            grad_shards=shards,
            optim_shards=shards,
            weight_bytes=weight,
            grad_bytes=weight,
            optim_bytes=2 * weight,
            compute_bytes=compute,
            gathered_layers=2 if (shards > 1 or cast) and on_cuda else 0,
            param_offload=on_cuda and not policy and bool(fsdp.get("param_offload", False)),
            optimizer_offload=on_cuda and not policy and bool(fsdp.get("optimizer_offload", False)),
            params_on_host=policy,
            optim_on_host=policy,
        )
    if strategy == "deepspeed":
        ds = select(config, f"{section}.deepspeed_config", {}) or {}
        key = f"{section}.deepspeed_config"
        stage = int(ds.get("zero_stage", 2))
        dtype = ds.get("dtype") or ("bf16" if on_cuda else "fp32")
        compute = dtype_bytes(dtype, f"{key}.dtype")
        offload = str(ds.get("offload", "none")).lower() == "cpu" and on_cuda
        return TrainState(
            strategy="deepspeed",
            shards=world if stage >= 3 else 1,
            grad_shards=world if stage >= 2 else 1,
            optim_shards=world,
            weight_bytes=compute,
            grad_bytes=compute,
            optim_bytes=12,  # an fp32 master copy of the partition (also in fp32 mode) and AdamW's two moments
            compute_bytes=compute,
            gathered_layers=2 if stage >= 3 and world > 1 else 0,
            param_offload=False,
            optimizer_offload=False,
            params_on_host=offload and stage >= 3,
            optim_on_host=offload,
            flat_optimizer=True,
            bucket_bytes=DEEPSPEED_REDUCE_BUCKET * compute if stage in (1, 3) else 0,
        )
    if strategy == "megatron":
        mg = select(config, f"{section}.megatron", {}) or {}
        shards = int(mg.get("tensor_model_parallel_size", 1)) * int(mg.get("pipeline_model_parallel_size", 1))
        return TrainState(
            strategy="megatron",
            shards=shards,
            grad_shards=shards,
            optim_shards=shards,
            weight_bytes=4,
            grad_bytes=4,
            optim_bytes=8,
            compute_bytes=4,
            gathered_layers=0,
            param_offload=on_cuda and bool(mg.get("param_offload", False)),
            optimizer_offload=on_cuda and bool(mg.get("optimizer_offload", False)),
            params_on_host=False,
            optim_on_host=False,
            fused_projections=True,
        )
    raise RLCoreError(f"{ACTOR}.strategy={strategy}: the planner knows fsdp, deepspeed and megatron")


def plan_settings(config: DictConfig, device_type: str) -> PlanSettings:
    """The :class:`PlanSettings` of the resolved ``config`` for a run on ``device_type`` (``cuda``/``cpu``)."""
    from rlcore import load_plugins
    from rlcore.api import (
        LOG_PROB_BUDGET,
        ActorConfig,
        RefConfig,
        RolloutConfig,
        data_parallel_size,
        inference_micro_batch_size,
        ppo_batch_sizes,
        token_budget,
    )

    world = int(select(config, "trainer.nnodes", 1)) * int(select(config, "trainer.n_gpus_per_node", 1))
    dp = data_parallel_size(config, ACTOR, world)
    actor = ActorConfig.from_tree(config)
    rollout = RolloutConfig.from_tree(config)
    ref = RefConfig.from_tree(config)
    n = int(rollout.n)
    sizes = ppo_batch_sizes(actor, n, dp)
    strategy = str(select(config, f"{ACTOR}.strategy", "fsdp"))
    use_reference = _flag(config, f"{ACTOR}.use_kl_loss") or _flag(config, "algorithm.use_kl_in_reward")
    critic_enable = select(config, "critic.enable")
    if critic_enable is None:
        registry = load_plugins().registry
        estimator = str(select(config, "algorithm.adv_estimator", "gae"))
        critic_enable = registry.has("advantage_estimator", estimator) and bool(
            registry.spec("advantage_estimator", estimator).needs_critic
        )
    budget = select(config, f"{ARR}.rollout.max_num_batched_tokens")
    actor_state = train_state(config, ACTOR, strategy, world, device_type)
    # the rollout serves rollout.dtype on CUDA, elsewhere the dtype the trainer computes in
    rollout_bytes = dtype_bytes(select(config, f"{ARR}.rollout.dtype", "bf16"), f"{ARR}.rollout.dtype")
    return PlanSettings(
        device_type=device_type,
        world=world,
        dp=dp,
        ulysses=int(select(config, f"{ACTOR}.ulysses_sequence_parallel_size", 1)),
        prompts=int(select(config, "data.train_batch_size")),
        n=n,
        prompt_len=int(select(config, "data.max_prompt_length")),
        response_len=int(select(config, f"{ARR}.rollout.response_length", select(config, "data.max_response_length"))),
        mini=sizes.mini,
        micro=sizes.micro,
        update_token_budget=token_budget(actor, "use_dynamic_bsz", "ppo_max_token_len_per_gpu"),
        log_prob_micro=inference_micro_batch_size(rollout, dp),
        ref_micro=inference_micro_batch_size(ref, dp),
        log_prob_token_budget=token_budget(rollout, *LOG_PROB_BUDGET),
        gradient_checkpointing=_flag(config, f"{ARR}.model.enable_gradient_checkpointing"),
        remove_padding=_flag(config, f"{ARR}.model.use_remove_padding"),
        activation_offload=_flag(config, f"{ARR}.model.enable_activation_offload") and device_type == "cuda",
        use_reference=use_reference,
        use_critic=bool(critic_enable),
        rollout_name=str(select(config, f"{ARR}.rollout.name", "hf")),
        rollout_bytes=rollout_bytes if device_type == "cuda" else actor_state.compute_bytes,
        rollout_tp=int(select(config, f"{ARR}.rollout.tensor_model_parallel_size", 1)),
        gpu_memory_utilization=float(select(config, f"{ARR}.rollout.gpu_memory_utilization", 0.5)),
        max_num_batched_tokens=None if budget is None else int(budget),
        enforce_eager=_flag(config, f"{ARR}.rollout.enforce_eager"),
        free_cache_engine=bool(select(config, f"{ARR}.rollout.free_cache_engine", True)),
        ppo_epochs=int(actor.ppo_epochs),
        actor=actor_state,
        ref=train_state(config, f"{ARR}.ref", strategy, world, device_type) if use_reference else None,
        critic=train_state(config, "critic", strategy, world, device_type) if critic_enable else None,
    )
