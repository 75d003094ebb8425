"""Step time from FLOPs and memory traffic at stated efficiencies.

Training and log-prob passes are compute-bound: ``2·N`` FLOPs per token forward, ``6·N`` forward and backward
(``8·N`` with gradient checkpointing, which runs the forward twice), plus causal attention ``4·layers·heads·
head_dim`` per token per position attended (half the sequence on average). Prefill likewise. Each decoding
step takes the longer of its FLOPs (``2·N`` per row plus attention) and its memory traffic (the weights once,
plus the KV cache it reads: all of the HF engine's static cache, the filled part for vLLM/SGLang). ``N``
counts the parameters that multiply (the input embedding is a lookup, not a product).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlcore_plugin_plan.devices import Device
from rlcore_plugin_plan.memory import kv_cache_bytes
from rlcore_plugin_plan.model_size import ModelSize
from rlcore_plugin_plan.settings import PlanSettings

#: share of the device's peak bf16 FLOP/s that training, prefill and log-prob passes reach (stated, not measured)
COMPUTE_EFFICIENCY = 0.4
#: share of the device's memory bandwidth that a decoding step reaches
BANDWIDTH_EFFICIENCY = 0.6


@dataclass(frozen=True)
class StepTime:
    """Seconds per phase of one step on one rank (all ranks work in parallel)."""

    generation: float
    old_log_prob: float
    ref_log_prob: float
    critic: float
    update: float

    @property
    def step(self) -> float:
        """The whole step."""
        return self.generation + self.old_log_prob + self.ref_log_prob + self.critic + self.update

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data (seconds) with the efficiencies assumed."""
        return {
            "generation_s": self.generation,
            "old_log_prob_s": self.old_log_prob,
            "ref_log_prob_s": self.ref_log_prob,
            "critic_s": self.critic,
            "update_s": self.update,
            "step_s": self.step,
            "compute_efficiency": COMPUTE_EFFICIENCY,
            "bandwidth_efficiency": BANDWIDTH_EFFICIENCY,
        }


def multiplying_params(size: ModelSize) -> int:
    """Parameters that take part in matrix products (a tied embedding is the output projection)."""
    return size.params if size.tied else size.params - size.embedding_params


def attention_flops(size: ModelSize, tokens: int, context: float) -> float:
    """Forward attention FLOPs of ``tokens`` queries over ``context`` positions each (QKᵀ and AV)."""
    shape = size.shape
    return 4.0 * shape.layers * shape.heads * shape.head_dim * tokens * context


def forward_flops(size: ModelSize, rows: int, seq: int) -> float:
    """Forward FLOPs of ``rows`` causal sequences of ``seq`` tokens."""
    return 2.0 * multiplying_params(size) * rows * seq + attention_flops(size, rows * seq, seq / 2)


def generation_seconds(size: ModelSize, s: PlanSettings, device: Device, chunk: int, cache_rows: int) -> float:
    """Prefill and decode of the rank's responses in chunks of ``chunk`` rows (``cache_rows`` in the cache)."""
    rows = s.rollout_rows
    chunk = max(1, min(chunk, rows))
    chunks = -(-rows // chunk)
    compute = device.bf16_flops * COMPUTE_EFFICIENCY
    bandwidth = device.bandwidth * BANDWIDTH_EFFICIENCY
    prefill = forward_flops(size, chunk, s.prompt_len) / compute
    weights = size.params * s.rollout_bytes / max(1, s.rollout_tp)
    context = s.prompt_len + s.response_len / 2
    kv_read: float
    if s.rollout_name == "hf":
        kv_read = kv_cache_bytes(size.shape, cache_rows, s.prompt_len + s.response_len, s.rollout_bytes)
    else:
        kv_read = kv_cache_bytes(size.shape, chunk, int(context), s.rollout_bytes) / max(1, s.rollout_tp)
    step_flops = 2.0 * multiplying_params(size) * chunk + attention_flops(size, chunk, context)
    step = max(step_flops / compute, (weights + kv_read) / bandwidth)
    return chunks * (prefill + s.response_len * step)


def step_time(size: ModelSize, s: PlanSettings, device: Device, chunk: int, cache_rows: int) -> StepTime:
    """The :class:`StepTime` of one step with generation chunks of ``chunk`` rows."""
    compute = device.bf16_flops * COMPUTE_EFFICIENCY
    seq = s.prompt_len + s.response_len
    forward = forward_flops(size, s.responses_per_rank, seq) / s.model_parallel / compute
    backward_factor = 4.0 if s.gradient_checkpointing else 3.0
    return StepTime(
        generation=generation_seconds(size, s, device, chunk, cache_rows),
        old_log_prob=forward,
        ref_log_prob=forward if s.ref is not None else 0.0,
        critic=forward * (1 + backward_factor * s.ppo_epochs) if s.critic is not None else 0.0,
        update=forward * backward_factor * s.ppo_epochs,
    )
