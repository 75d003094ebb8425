"""Contract suite for ``health_monitor`` components (run-health monitors).

Subclass :class:`HealthMonitorContract` in a test module, name the subclass ``Test...``, set
``component_name`` and give the metric rows on which the monitor must report (each row one step's metrics,
as ``metrics.jsonl`` holds them)::

    from rlcore_testkit.contracts import HealthMonitorContract

    class TestEntropyFloor(HealthMonitorContract):
        component_name = "entropy_floor"
        firing_rows = [{"step": s, "actor/entropy": 1.0 if s < 5 else 0.01} for s in range(1, 10)]

The suite resolves the monitor through a freshly loaded plugin manager and its settings from the default
config (so the plugin's ``config_defaults`` must mount its section at ``trainer.monitors.<name>``), then
checks: the spec and the settings class (a :class:`rlcore.api.MonitorSettings` subclass whose every field has
a default), that the monitor builds, that an empty history and a quiet run (:attr:`quiet_rows`, steady
signals that should alarm no monitor) give no finding, and that on :attr:`firing_rows` it reports, each
finding well formed (its monitor's name, a known severity, a one-line message, ``began_at <= step``, numeric
values) and each condition once. A monitor whose spec asks for samples gets :meth:`samples` with every view.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pytest

from rlcore.api import (
    SEVERITIES,
    Finding,
    HealthMonitor,
    HealthMonitorSpec,
    HealthView,
    MonitorSettings,
    PluginManager,
    ResponseSample,
    load_config,
)

#: the validation metric the quiet run logs every 5 steps
VAL_KEY = "val-core/rlcore/arith/reward/mean@1"


def steady_rows(steps: int = 30) -> list[dict[str, float]]:
    """``steps`` metric rows of a healthy run: training and validation reward rising slowly together, steady
    entropy, KL, gradient norm, clip fraction and lengths with a little deterministic jitter, no clipped
    response, finite everything; a validation row every 5 steps."""
    rows = []
    for step in range(1, steps + 1):
        jitter = 0.02 * math.sin(step * 1.7)
        row = {
            "step": float(step),
            "critic/score/mean": 0.3 + 0.005 * step + jitter,
            "critic/rewards/mean": 0.3 + 0.005 * step + jitter,
            "actor/entropy": 1.2 + jitter,
            "actor/ppo_kl": 0.001 + 0.0002 * math.sin(step),
            "actor/kl_loss": 0.002 + 0.0002 * math.cos(step),
            "actor/grad_norm": 1.0 + 5 * jitter,
            "actor/pg_clipfrac": 0.05 + jitter,
            "actor/pg_loss": -0.01 + jitter,
            "response_length/mean": 40.0 + 10 * jitter,
            "response_length/max": 60.0,
            "response_length/clip_ratio": 0.0,
            "training/rollout_probs_diff_mean": 0.01 + 0.1 * abs(jitter),
        }
        if step % 5 == 0:
            row[VAL_KEY] = 0.3 + 0.005 * step
        rows.append(row)
    return rows


class HealthMonitorContract:
    """Tests every run-health monitor must pass; subclasses set ``component_name`` and ``firing_rows``."""

    #: the registered monitor name under test
    component_name: ClassVar[str] = ""
    #: metric rows (one per step, each with ``"step"``) on which the monitor must report at least one finding
    firing_rows: ClassVar[Sequence[Mapping[str, float]]] = ()
    #: metric rows of a healthy run, on which the monitor must stay silent
    quiet_rows: ClassVar[Sequence[Mapping[str, float]]] = steady_rows()

    def samples(self, step: int, firing: bool) -> list[ResponseSample]:
        """The decoded responses of ``step`` handed to a monitor whose spec asks for samples: varied, correct
        arithmetic answers on the quiet run; override to give :attr:`firing_rows` the samples that should fire."""
        return [
            ResponseSample(
                prompt=f"What is {step} + {i}?",
                response=f"{step} plus {i} makes {step + i}, so the answer is {step + i}.",
                score=1.0,
                response_length=12 + i,
                extra={"acc": 1.0},
            )
            for i in range(8)
        ]

    @pytest.fixture
    def spec(self, plugin_manager: PluginManager) -> HealthMonitorSpec:
        """The monitor's capability spec, as registered."""
        assert self.component_name, f"{type(self).__name__} must set component_name"
        return plugin_manager.registry.spec("health_monitor", self.component_name)

    @pytest.fixture
    def monitor_class(self, plugin_manager: PluginManager) -> Any:
        """The registered monitor class."""
        return plugin_manager.registry.load("health_monitor", self.component_name)

    @pytest.fixture
    def settings(self, monitor_class: Any, plugin_manager: PluginManager) -> MonitorSettings:
        """The monitor's section of the default config, read typed as the run reads it."""
        config = load_config()
        return monitor_class.config_class.from_tree(config, f"trainer.monitors.{self.component_name}")

    def make_monitor(self, monitor_class: Any, settings: MonitorSettings) -> HealthMonitor:
        """A fresh monitor built as the run builds it."""
        return monitor_class(settings)

    def run(
        self, monitor: HealthMonitor, rows: Sequence[Mapping[str, float]], spec: HealthMonitorSpec, firing: bool
    ) -> list[tuple[HealthView, list[Finding]]]:
        """Feed ``rows`` to ``monitor`` one step at a time, as the run does; each view with its findings."""
        seen: list[tuple[HealthView, list[Finding]]] = []
        history: list[Mapping[str, float]] = []
        for row in rows:
            history.append(dict(row))
            step = int(row["step"])
            samples = self.samples(step, firing)[: spec.samples] if spec.samples else []
            view = HealthView(step=step, metrics=dict(row), history=tuple(history), samples=tuple(samples))
            seen.append((view, list(monitor.check(view))))
        return seen

    def test_is_registered_with_a_spec(self, spec: HealthMonitorSpec) -> None:
        """The name resolves to a ``health_monitor`` whose spec is a :class:`HealthMonitorSpec`."""
        assert isinstance(spec, HealthMonitorSpec)

    def test_settings_class(self, monitor_class: Any, settings: MonitorSettings) -> None:
        """``config_class`` is a frozen :class:`MonitorSettings` dataclass, every field with a default, mounted
        at ``trainer.monitors.<name>`` with those defaults."""
        config_class = getattr(monitor_class, "config_class", None)
        assert isinstance(config_class, type) and issubclass(config_class, MonitorSettings), (
            f"{self.component_name}: config_class must be a rlcore.api.MonitorSettings subclass, got {config_class!r}"
        )
        assert dataclasses.is_dataclass(config_class) and config_class.__dataclass_params__.frozen  # type: ignore[attr-defined]
        assert config_class.PATH == f"trainer.monitors.{self.component_name}", config_class.PATH
        assert settings == config_class(), "the default config's section differs from the class's defaults"

    def test_builds_with_its_settings(self, monitor_class: Any, settings: MonitorSettings) -> None:
        """``cls(settings)`` is a :class:`HealthMonitor` named after its registered name."""
        monitor = self.make_monitor(monitor_class, settings)
        assert isinstance(monitor, HealthMonitor)
        assert monitor.name == self.component_name

    def test_silent_on_an_empty_history(
        self, monitor_class: Any, settings: MonitorSettings, spec: HealthMonitorSpec
    ) -> None:
        """Steps that logged nothing the monitor reads give no finding (and raise nothing)."""
        rows = [{"step": float(step)} for step in range(1, 6)]
        seen = self.run(self.make_monitor(monitor_class, settings), rows, spec, firing=False)
        assert [finding for _, found in seen for finding in found] == []

    def test_silent_on_a_quiet_run(
        self, monitor_class: Any, settings: MonitorSettings, spec: HealthMonitorSpec
    ) -> None:
        """A healthy run's signals (:attr:`quiet_rows`) give no finding."""
        seen = self.run(self.make_monitor(monitor_class, settings), self.quiet_rows, spec, firing=False)
        assert [finding.message for _, found in seen for finding in found] == []

    def test_fires_with_well_formed_findings(
        self, monitor_class: Any, settings: MonitorSettings, spec: HealthMonitorSpec
    ) -> None:
        """On :attr:`firing_rows` the monitor reports; every finding names the monitor, has a known severity,
        a one-line message, ``began_at <= step`` at the step it was returned, numeric values, and each condition
        (signal, began_at) is reported once; two fresh monitors report the same."""
        assert self.firing_rows, f"{type(self).__name__} must set firing_rows: metric rows on which it reports"
        seen = self.run(self.make_monitor(monitor_class, settings), self.firing_rows, spec, firing=True)
        findings = [(view, finding) for view, found in seen for finding in found]
        assert findings, f"{self.component_name} reported nothing on firing_rows"
        for view, finding in findings:
            assert isinstance(finding, Finding), finding
            assert finding.monitor == self.component_name, finding
            assert finding.severity in SEVERITIES, finding
            assert finding.signal, finding
            assert finding.message.strip() and "\n" not in finding.message, finding
            assert finding.step == view.step and finding.began_at <= finding.step, finding
            assert all(isinstance(v, int | float) for v in finding.values.values()), finding
        conditions = [(finding.signal, finding.began_at) for _, finding in findings]
        assert len(conditions) == len(set(conditions)), f"a condition was reported more than once: {conditions}"
        again = self.run(self.make_monitor(monitor_class, settings), self.firing_rows, spec, firing=True)
        assert [finding for _, found in again for finding in found] == [finding for _, finding in findings]
