"""The verdict: does every phase fit the device, and if not, which setting would make the phase fit."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from rlcore.plan.devices import Device
from rlcore.plan.model_size import ModelSize
from rlcore.plan.phases import CUDA_RUNTIME_BYTES, Phase, log_prob_phase, resident, update_phase
from rlcore.plan.settings import ACTOR, ARR, PlanSettings, TrainState


@dataclass(frozen=True)
class Finding:
    """A phase that does not fit, and the change that would make it fit (empty when none is known)."""

    phase: str
    peak: int
    fix: str

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data."""
        return {"phase": self.phase, "peak_bytes": self.peak, "fix": self.fix}


def _largest_fitting(limit: int, start: int, peak_of: Any) -> int | None:
    """The largest of ``start``, ``start // 2`` ... 1 whose ``peak_of(rows)`` is at most ``limit``."""
    rows = start
    while rows >= 1:
        if peak_of(rows) <= limit:
            return rows
        rows //= 2
    return None


def _state_fix(state: TrainState, section: str) -> str:
    """The sharding/offload setting that takes training state off the device, by engine."""
    if state.strategy == "fsdp":
        return f"{section}.fsdp_config.offload_policy=true (parameters, gradients and optimizer state in host memory), or more ranks"
    if state.strategy == "deepspeed":
        return f"{section}.deepspeed_config.zero_stage=3 with offload=cpu, or more ranks"
    return f"{section}.megatron.tensor_model_parallel_size={state.shards * 2} (tensor parallel over more ranks)"


def _update_fix(size: ModelSize, s: PlanSettings, device: Device, phase: Phase) -> str:
    state = s.actor if phase.name == "actor_update" else s.critic
    section = ACTOR if phase.name == "actor_update" else "critic"
    assert state is not None
    limit = device.memory_bytes
    if s.update_token_budget is not None:
        seq = s.prompt_len + s.response_len
        rows = _largest_fitting(limit, max(1, s.update_token_budget // seq), lambda r: _update_peak(size, s, state, phase.name, r, seq))
        if rows is not None:
            return f"{section}.ppo_max_token_len_per_gpu={rows * seq}"
    else:
        rows = _largest_fitting(limit, s.micro // 2, lambda r: update_phase(size, dataclasses.replace(s, micro=r), state, phase.name, r).peak)
        if rows is not None:
            return f"{section}.ppo_micro_batch_size_per_gpu={rows}"
    if not s.gradient_checkpointing:
        checkpointed = dataclasses.replace(s, gradient_checkpointing=True)
        rows = _largest_fitting(limit, s.micro, lambda r: update_phase(size, checkpointed, state, phase.name, r).peak)
        if rows is not None:
            return f"{ARR}.model.enable_gradient_checkpointing=true with {section}.ppo_micro_batch_size_per_gpu={rows}"
    return _state_fix(state, section)


def _update_peak(size: ModelSize, s: PlanSettings, state: TrainState, name: str, rows: int, seq: int) -> int:
    budgeted = dataclasses.replace(s, update_token_budget=rows * seq)
    return update_phase(size, budgeted, state, name, rows).peak


def _log_prob_fix(size: ModelSize, s: PlanSettings, device: Device, phase: Phase) -> str:
    section = f"{ARR}.rollout" if phase.name == "old_log_prob" else f"{ARR}.ref"
    if s.log_prob_token_budget is None:
        rows = _largest_fitting(device.memory_bytes, phase.rows // 2, lambda r: log_prob_phase(size, s, phase.name, r).peak)
        if rows is not None:
            return f"{section}.log_prob_micro_batch_size_per_gpu={rows}"
    return _state_fix(s.actor, ACTOR)


def _rollout_fix(size: ModelSize, s: PlanSettings, device: Device, phase: Phase) -> str:
    key = f"{ARR}.rollout.gpu_memory_utilization"
    trainer = sum(resident(size, s, rollout_phase=True).values()) + CUDA_RUNTIME_BYTES
    offload = f"{ACTOR}.fsdp_config.param_offload=true and optimizer_offload=true"
    if s.rollout_name == "hf":
        if phase.rows == 0:
            return f"raise {key} above {s.gpu_memory_utilization}, or {offload}"
        return f"lower {key}, or {offload}"
    room = (device.memory_bytes - trainer) / device.memory_bytes
    if phase.rows < 1:
        return f"raise {key} or {ARR}.rollout.tensor_model_parallel_size={s.rollout_tp * 2}"
    if room > 0.05:
        return f"{key}={room:.2f} (what the trainer leaves), or {offload}"
    return offload


def findings(size: ModelSize, s: PlanSettings, device: Device, phases: list[Phase]) -> list[Finding]:
    """The phases whose peak exceeds the device's memory (or, for the rollout, that leave no room for one
    row), each with a fix."""
    found = []
    for phase in phases:
        if phase.peak <= device.memory_bytes and (phase.name != "rollout" or phase.rows > 0):
            continue
        if phase.name.endswith("_update"):
            fix = _update_fix(size, s, device, phase)
        elif phase.name.endswith("_log_prob"):
            fix = _log_prob_fix(size, s, device, phase)
        else:
            fix = _rollout_fix(size, s, device, phase)
        found.append(Finding(phase.name, phase.peak, fix))
    return found
