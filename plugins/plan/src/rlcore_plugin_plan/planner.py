"""``rlcore plan``: per-rank peak memory of each phase of a step, the step time and a verdict, before launch.

:func:`make_plan` reads a resolved run config and a device of :data:`~rlcore_plugin_plan.devices.DEVICES`; the model's
sizes come from its Hugging Face config (built on the meta device). The parts, one job each:
:mod:`~rlcore_plugin_plan.settings` (what the config says), :mod:`~rlcore_plugin_plan.model_size` (the model),
:mod:`~rlcore_plugin_plan.memory` (the formulas), :mod:`~rlcore_plugin_plan.phases` (the phases' terms),
:mod:`~rlcore_plugin_plan.timing` (step time), :mod:`~rlcore_plugin_plan.verdict` (fits, or the fix) and
:mod:`~rlcore_plugin_plan.render` (text and JSON). docs/plan.md describes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from rlcore_plugin_plan.devices import Device
from rlcore_plugin_plan.model_size import ModelSize
from rlcore_plugin_plan.phases import Phase
from rlcore_plugin_plan.settings import PlanSettings
from rlcore_plugin_plan.timing import StepTime
from rlcore_plugin_plan.verdict import Finding

__all__ = ["Plan", "make_plan", "plan_for_config"]


@dataclass(frozen=True)
class Plan:
    """A plan: the device, the model, the settings read, each phase's peak, the step time and the findings
    (phases that do not fit, with their fixes; none: it fits)."""

    device: Device
    model: ModelSize
    settings: PlanSettings
    phases: list[Phase]
    time: StepTime
    findings: list[Finding]

    @property
    def fits(self) -> bool:
        """Whether every phase fits the device."""
        return not self.findings

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data."""
        return {
            "device": self.device.as_dict(),
            "model": self.model.as_dict(),
            "world_size": self.settings.world,
            "data_parallel_size": self.settings.dp,
            "phases": [phase.as_dict() for phase in self.phases],
            "time": self.time.as_dict(),
            "fits": self.fits,
            "findings": [finding.as_dict() for finding in self.findings],
        }


def make_plan(size: ModelSize, settings: PlanSettings, device: Device) -> Plan:
    """The :class:`Plan` of ``settings`` for the model ``size`` on ``device``."""
    from rlcore_plugin_plan.phases import all_phases
    from rlcore_plugin_plan.timing import step_time
    from rlcore_plugin_plan.verdict import findings

    phases = all_phases(size, settings, device)
    rollout = phases[0]
    cache_rows = rollout.rows
    time = step_time(size, settings, device, max(1, rollout.rows), max(1, cache_rows))
    return Plan(device, size, settings, phases, time, findings(size, settings, device, phases))


def plan_for_config(config: DictConfig, device_name: str | None = None, *, offline: bool = False) -> Plan:
    """The plan of the resolved run ``config`` on the named device (None: this machine's GPU, else ``cpu``);
    ``offline``: a hub model's config only from the local cache.

    A ``cpu`` device plans a run with ``trainer.device=cpu`` rules (no CUDA runtime, no cache alignment,
    chunks by ``max_num_batched_tokens``); a GPU plans the CUDA run."""
    from rlcore.api import select
    from rlcore_plugin_plan.devices import detect_device, device_named
    from rlcore_plugin_plan.model_size import model_size_at
    from rlcore_plugin_plan.settings import plan_settings

    device = device_named(device_name or detect_device())
    path = select(config, "actor_rollout_ref.model.path")
    if path is None:
        from rlcore.api import RLCoreError

        raise RLCoreError("actor_rollout_ref.model.path is not set: the plan needs the model's config")
    override = select(config, "actor_rollout_ref.model.override_config", {}) or {}
    size = model_size_at(
        str(path),
        bool(select(config, "actor_rollout_ref.model.trust_remote_code", False)),
        dict(override),
        offline=offline,
    )
    settings = plan_settings(config, "cpu" if device.name == "cpu" else "cuda")
    return make_plan(size, settings, device)
