"""Per-rank peak memory of each phase of a step: rollout, old log-probs, reference log-probs, actor update
(and critic update), each a list of named terms in bytes, with the rows per micro-batch the phase uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlcore_plugin_hf.chunking import aligned_length, bucket, bucket_floor, row_bytes

from rlcore.plan.devices import GIB, Device
from rlcore.plan.memory import (
    decode_step_bytes,
    fused_weight_bytes,
    inference_activations,
    kv_cache_bytes,
    state_bytes,
    training_activations,
)
from rlcore.plan.model_size import ModelSize
from rlcore.plan.settings import PlanSettings, TrainState

#: device memory a CUDA process holds besides tensors (context, cuBLAS/NCCL workspaces): a stated allowance
CUDA_RUNTIME_BYTES = 1 * GIB
#: vLLM/SGLang: the part of their gpu_memory_utilization share kept for activations and CUDA graphs (rough)
ENGINE_WORKSPACE_BYTES = 1 * GIB


@dataclass
class Phase:
    """One phase's peak on one rank: ``terms`` (name → bytes) sum to :attr:`peak`; ``rows`` is its
    micro-batch (or chunk) in responses, ``notes`` say what was assumed."""

    name: str
    terms: dict[str, int]
    rows: int
    notes: list[str] = field(default_factory=list)

    @property
    def peak(self) -> int:
        """The phase's peak bytes."""
        return sum(self.terms.values())

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data."""
        return {"name": self.name, "peak_bytes": self.peak, "rows": self.rows, "terms": self.terms, "notes": self.notes}


def resident(size: ModelSize, s: PlanSettings) -> dict[str, int]:
    """What the training engines keep on the device outside their own compute: the actor's parameters and
    optimizer state (gradients are freed after each step), the reference's and the critic's, less what
    ``param_offload``/``optimizer_offload`` move out between phases."""
    terms: dict[str, int] = {}
    for name, state, trainable in (("actor", s.actor, True), ("ref", s.ref, False), ("critic", s.critic, True)):
        if state is None:
            continue
        held = state_bytes(size, state, trainable=trainable, device_type=s.device_type)
        terms[f"{name}_params"] = 0 if state.param_offload else held["params"]
        if trainable:
            terms[f"{name}_optimizer"] = 0 if state.optimizer_offload else held["optimizer"]
    return {k: v for k, v in terms.items() if v}


def _update_tokens(s: PlanSettings, rows: int) -> tuple[int, int]:
    """Tokens into the layers and into the vocabulary projection for a micro-batch of ``rows`` responses."""
    seq = s.prompt_len + s.response_len
    tokens = rows * seq
    if s.update_token_budget is not None:
        tokens = max(seq, s.update_token_budget)
        rows = max(1, tokens // seq)
    return tokens, rows * s.response_len


def update_phase(size: ModelSize, s: PlanSettings, state: TrainState, name: str, rows: int) -> Phase:
    """The update of ``state`` (actor or critic) with micro-batches of ``rows`` responses."""
    held = state_bytes(size, state, trainable=True, device_type=s.device_type)
    tokens, logit_tokens = _update_tokens(s, rows)
    acts = training_activations(
        size.shape,
        rows=rows,
        seq=s.prompt_len + s.response_len,
        tokens=tokens,
        logit_tokens=logit_tokens if name == "actor_update" else 0,
        dtype_bytes=state.compute_bytes,
        checkpointing=s.gradient_checkpointing,
        packed=s.remove_padding,
        offload=s.activation_offload,
        ulysses=s.ulysses,
    )
    prefix = "actor" if name == "actor_update" else "critic"
    terms = {f"{prefix}_{key}": value for key, value in held.items()}
    others = resident(size, s)
    terms.update({k: v for k, v in others.items() if not k.startswith(prefix)})
    terms.update(acts)
    if s.device_type == "cuda":
        terms["cuda_runtime"] = CUDA_RUNTIME_BYTES
    return Phase(name, {k: v for k, v in terms.items() if v}, rows)


def log_prob_phase(size: ModelSize, s: PlanSettings, name: str, micro: int | None) -> Phase:
    """A log-prob pass (old or reference) with micro-batches of ``micro`` responses (None: all at once)."""
    rows = micro or s.responses_per_rank
    seq = s.prompt_len + s.response_len
    tokens = rows * seq
    if s.log_prob_token_budget is not None:
        tokens = max(seq, s.log_prob_token_budget)
        rows = max(1, tokens // seq)
    state = s.ref if name == "ref_log_prob" and s.ref is not None else s.actor
    terms = resident(size, s)
    held = state_bytes(size, state, trainable=False, device_type=s.device_type)
    owner = "ref" if name == "ref_log_prob" and s.ref is not None else "actor"
    terms[f"{owner}_params"] = held["params"]  # loaded for the pass even when offloaded between phases
    terms["gathered_layers"] = held["gathered_layers"]
    terms.update(
        inference_activations(
            size.shape,
            rows=rows,
            seq=seq,
            tokens=tokens,
            logit_tokens=rows * s.response_len,
            dtype_bytes=state.compute_bytes,
            packed=s.remove_padding,
        )
    )
    if s.device_type == "cuda":
        terms["cuda_runtime"] = CUDA_RUNTIME_BYTES
    return Phase(name, {k: v for k, v in terms.items() if v}, rows)


def hf_rollout_rows(size: ModelSize, s: PlanSettings, device: Device, in_use: int) -> tuple[int, int, int]:
    """The HF engine's chunk: (rows generated together, rows its cache holds, cache length), by its rules —
    on CPU the ``max_num_batched_tokens`` budget, on CUDA the free share of ``gpu_memory_utilization``
    (rows rounded to a batch-size bucket with CUDA graphs); rows 0 when not one fits."""
    rows = s.rollout_rows
    if s.device_type != "cuda":
        seq = s.prompt_len + s.response_len
        chunk = rows if s.max_num_batched_tokens is None else min(rows, max(1, s.max_num_batched_tokens // seq))
        return chunk, chunk, seq
    cache_len = aligned_length(s.prompt_len + s.response_len)
    per_row = row_bytes(size.shape, s.prompt_len, cache_len, s.rollout_bytes)
    capacity = int((s.gpu_memory_utilization * device.memory_bytes - in_use) // per_row)
    if capacity < 1:
        return 0, 0, cache_len
    graphs = not s.enforce_eager
    chunk = min(rows, bucket_floor(capacity) if graphs else capacity)
    return chunk, bucket(chunk) if graphs else chunk, cache_len


def rollout_phase(size: ModelSize, s: PlanSettings, device: Device) -> Phase:
    """Generation: the trainer's resident state plus the engine's weights and KV cache."""
    terms = resident(size, s)
    shape = size.shape
    notes: list[str] = []
    if s.device_type == "cuda":
        terms["cuda_runtime"] = CUDA_RUNTIME_BYTES
    if s.rollout_name == "hf":
        shared = s.device_type == "cpu" and s.world == 1
        weights = 0 if shared else size.params * s.rollout_bytes
        if shared:
            notes.append("one CPU rank: the HF engine generates with the trainer's own tensors")
        terms["rollout_weights"] = weights
        terms["rollout_fused_weights"] = fused_weight_bytes(size, s.rollout_bytes)
        in_use = sum(terms.values())
        chunk, cache_rows, cache_len = hf_rollout_rows(size, s, device, in_use)
        if chunk == 0:
            notes.append("gpu_memory_utilization leaves no room for one row's KV cache")
            terms["kv_cache"] = kv_cache_bytes(shape, 1, cache_len, s.rollout_bytes)
            return Phase("rollout", terms, 0, notes)
        terms["kv_cache"] = kv_cache_bytes(shape, cache_rows, cache_len, s.rollout_bytes)
        margin = row_bytes(shape, s.prompt_len, cache_len, s.rollout_bytes)
        margin -= kv_cache_bytes(shape, 1, cache_len, s.rollout_bytes)
        terms["prefill_and_sampling"] = chunk * margin
        if s.device_type == "cuda" and not s.enforce_eager:
            terms["cuda_graphs"] = decode_step_bytes(shape, cache_rows, s.rollout_bytes)
        notes.append(f"{chunk} rows per chunk, cache {cache_rows} rows x {cache_len} positions")
        return Phase("rollout", {k: v for k, v in terms.items() if v}, chunk, notes)
    pool = int(s.gpu_memory_utilization * device.memory_bytes)
    weights = size.params * s.rollout_bytes // max(1, s.rollout_tp)
    terms["rollout_weights"] = weights
    terms["rollout_workspace"] = ENGINE_WORKSPACE_BYTES
    terms["kv_cache"] = max(0, pool - weights - ENGINE_WORKSPACE_BYTES)
    per_token = kv_cache_bytes(shape, 1, 1, s.rollout_bytes) // max(1, s.rollout_tp)
    rows = terms["kv_cache"] // max(1, per_token * (s.prompt_len + s.response_len))
    notes.append(f"{s.rollout_name}: gpu_memory_utilization x device memory, KV cache for {rows} full-length rows")
    return Phase("rollout", terms, int(rows), notes)


def all_phases(size: ModelSize, s: PlanSettings, device: Device, micro: int | None = None) -> list[Phase]:
    """Every phase of a step on one rank (the update with micro-batches of ``micro`` responses when given)."""
    phases = [rollout_phase(size, s, device), log_prob_phase(size, s, "old_log_prob", s.log_prob_micro)]
    if s.ref is not None:
        phases.append(log_prob_phase(size, s, "ref_log_prob", s.ref_micro))
    if s.critic is not None:
        phases.append(update_phase(size, s, s.critic, "critic_update", micro or s.micro))
    phases.append(update_phase(size, s, s.actor, "actor_update", micro or s.micro))
    return phases
