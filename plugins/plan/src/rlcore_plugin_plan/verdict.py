"""The verdict: does every phase fit the device, and if not, which setting would make the phase fit."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from rlcore_plugin_plan.devices import Device
from rlcore_plugin_plan.model_size import ModelSize
from rlcore_plugin_plan.phases import CUDA_RUNTIME_BYTES, Phase, log_prob_phase, resident, update_phase
from rlcore_plugin_plan.settings import ACTOR, ARR, PlanSettings, TrainState


@dataclass(frozen=True)
class Finding:
    """A phase that does not fit, and the change that would make it fit: ``settings`` (``key=value``
    overrides to apply as they are) or, when no single setting is known to suffice, ``advice`` in words."""

    phase: str
    peak: int
    settings: tuple[str, ...] = ()
    advice: str = ""

    @property
    def fix(self) -> str:
        """The fix as text."""
        return " ".join(self.settings) + (f" ({self.advice})" if self.settings and self.advice else self.advice)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data."""
        return {"phase": self.phase, "peak_bytes": self.peak, "settings": list(self.settings), "advice": self.advice}


def _largest_fitting(limit: int, start: int, peak_of: Any) -> int | None:
    """The largest of ``start``, ``start // 2`` ... 1 whose ``peak_of(rows)`` is at most ``limit``."""
    rows = start
    while rows >= 1:
        if peak_of(rows) <= limit:
            return rows
        rows //= 2
    return None


def _state_fix(state: TrainState, section: str) -> tuple[tuple[str, ...], str]:
    """The sharding/offload setting that takes training state off the device, by engine."""
    if state.strategy == "fsdp":
        return (
            f"{section}.fsdp_config.offload_policy=true",
        ), "parameters, gradients and optimizer state in host memory; or more ranks"
    if state.strategy == "deepspeed":
        return (f"{section}.deepspeed_config.zero_stage=3", f"{section}.deepspeed_config.offload=cpu"), "or more ranks"
    return (f"{section}.megatron.tensor_model_parallel_size={state.shards * 2}",), "tensor parallel over more ranks"


def _update_fix(size: ModelSize, s: PlanSettings, device: Device, phase: Phase) -> tuple[tuple[str, ...], str]:
    state = s.actor if phase.name == "actor_update" else s.critic
    section = ACTOR if phase.name == "actor_update" else "critic"
    assert state is not None
    limit = device.memory_bytes
    if s.update_token_budget is not None:
        seq = s.prompt_len + s.response_len
        rows = _largest_fitting(
            limit, max(1, s.update_token_budget // seq), lambda r: _update_peak(size, s, state, phase.name, r, seq)
        )
        if rows is not None:
            return (f"{section}.ppo_max_token_len_per_gpu={rows * seq}",), ""
    else:
        rows = _largest_fitting(
            limit,
            s.micro // 2,
            lambda r: update_phase(size, dataclasses.replace(s, micro=r), state, phase.name, r).peak,
        )
        if rows is not None:
            return (f"{section}.ppo_micro_batch_size_per_gpu={rows}",), ""
    if not s.gradient_checkpointing:
        checkpointed = dataclasses.replace(s, gradient_checkpointing=True)
        rows = _largest_fitting(limit, s.micro, lambda r: update_phase(size, checkpointed, state, phase.name, r).peak)
        if rows is not None:
            return (
                f"{ARR}.model.enable_gradient_checkpointing=true",
                f"{section}.ppo_micro_batch_size_per_gpu={rows}",
            ), ""
    return _state_fix(state, section)


def _update_peak(size: ModelSize, s: PlanSettings, state: TrainState, name: str, rows: int, seq: int) -> int:
    budgeted = dataclasses.replace(s, update_token_budget=rows * seq)
    return update_phase(size, budgeted, state, name, rows).peak


def _log_prob_fix(size: ModelSize, s: PlanSettings, device: Device, phase: Phase) -> tuple[tuple[str, ...], str]:
    section = f"{ARR}.rollout" if phase.name == "old_log_prob" else f"{ARR}.ref"
    if s.log_prob_token_budget is None:
        rows = _largest_fitting(
            device.memory_bytes, phase.rows // 2, lambda r: log_prob_phase(size, s, phase.name, r).peak
        )
        if rows is not None:
            return (f"{section}.log_prob_micro_batch_size_per_gpu={rows}",), ""
    return _state_fix(s.actor, ACTOR)


def _rollout_fix(size: ModelSize, s: PlanSettings, device: Device, phase: Phase) -> tuple[tuple[str, ...], str]:
    key = f"{ARR}.rollout.gpu_memory_utilization"
    offload = (f"{ACTOR}.fsdp_config.param_offload=true", f"{ACTOR}.fsdp_config.optimizer_offload=true")
    if s.rollout_name == "hf":
        if phase.rows == 0:
            return (), f"raise {key} above {s.gpu_memory_utilization}, or set {' '.join(offload)}"
        return offload, f"or lower {key}"
    if phase.rows < 1:
        return (f"{ARR}.rollout.tensor_model_parallel_size={s.rollout_tp * 2}",), f"or raise {key}"
    trainer = sum(resident(size, s).values()) + CUDA_RUNTIME_BYTES
    room = math.floor(100 * (device.memory_bytes - trainer) / device.memory_bytes) / 100
    if room >= 0.05:
        return (f"{key}={room:.2f}",), f"what the trainer leaves; or {' '.join(offload)}"
    return offload, ""


def findings(size: ModelSize, s: PlanSettings, device: Device, phases: list[Phase]) -> list[Finding]:
    """The phases whose peak exceeds the device's memory (or, for the rollout, that leave no room for one
    row), each with a fix."""
    found = []
    for phase in phases:
        if phase.peak <= device.memory_bytes and (phase.name != "rollout" or phase.rows > 0):
            continue
        if phase.name.endswith("_update"):
            settings, advice = _update_fix(size, s, device, phase)
        elif phase.name.endswith("_log_prob"):
            settings, advice = _log_prob_fix(size, s, device, phase)
        else:
            settings, advice = _rollout_fix(size, s, device, phase)
        found.append(Finding(phase.name, phase.peak, settings, advice))
    return found
