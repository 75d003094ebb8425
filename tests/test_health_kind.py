"""The ``health_monitor`` kind: its hook registers a monitor with its spec, the spec and the settings refuse
bad values naming the field, and a finding is plain JSON data."""

from __future__ import annotations

import dataclasses
import json
import types

import pytest

import rlcore
from rlcore.api import Finding, HealthMonitor, HealthMonitorSpec, HealthView, MonitorSettings, SpecError
from rlcore.config import ConfigError


@dataclasses.dataclass(frozen=True)
class FloorSettings(MonitorSettings):
    """``trainer.monitors.floor``."""

    PATH = "trainer.monitors.floor"
    #: a step whose actor/entropy is below this is a finding
    min_entropy: float = 0.05


class Floor:
    """Reports actor/entropy below a floor, once when it begins."""

    config_class = FloorSettings
    name = "floor"

    def __init__(self, settings: FloorSettings) -> None:
        self.settings = settings

    def check(self, view: HealthView) -> list[Finding]:
        """A finding when this step's entropy is below the floor."""
        entropy = view.metrics.get("actor/entropy", 1.0)
        if entropy >= self.settings.min_entropy:
            return []
        return [Finding(self.name, "warning", "actor/entropy", f"actor/entropy {entropy} low", view.step, view.step)]


def test_hook_register_health_monitors(registered) -> None:
    """A monitor registered by the hook is found by kind and name, with its spec, and its target is a
    :class:`HealthMonitor` once built with its settings."""

    def register_health_monitors(register):
        register("floor", Floor, description="entropy floor", spec=HealthMonitorSpec(reads=["actor/entropy"]))

    plugin = types.SimpleNamespace(register_health_monitors=rlcore.hookimpl(register_health_monitors))
    with registered(plugin, name="health-test") as manager:
        component = manager.registry.get("health_monitor", "floor")
        assert component.spec == HealthMonitorSpec(reads=("actor/entropy",), samples=0)
        monitor = manager.registry.load("health_monitor", "floor")(FloorSettings())
        assert isinstance(monitor, HealthMonitor)
        view = HealthView(step=3, metrics={"actor/entropy": 0.01}, history=[{"step": 3, "actor/entropy": 0.01}])
        (finding,) = monitor.check(view)
        assert json.loads(json.dumps(finding.as_dict()))["began_at"] == 3


def test_a_monitor_without_a_spec_gets_the_default_one(registered) -> None:
    """No ``spec=``: reads nothing declared and asks for no samples."""
    plugin = types.SimpleNamespace(register_health_monitors=rlcore.hookimpl(lambda register: register("floor", Floor)))
    with registered(plugin, name="health-test") as manager:
        assert manager.registry.spec("health_monitor", "floor") == HealthMonitorSpec()


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"reads": "actor/entropy"}, "HealthMonitorSpec.reads must be a tuple"),
        ({"reads": ("",)}, "HealthMonitorSpec.reads must hold non-empty strings"),
        ({"samples": -1}, "HealthMonitorSpec.samples must be an int >= 0, got -1"),
        ({"samples": True}, "HealthMonitorSpec.samples must be an int >= 0, got True"),
    ],
)
def test_the_spec_refuses_bad_fields(kwargs: dict, says: str) -> None:
    with pytest.raises(SpecError, match=says.replace("(", r"\(")):
        HealthMonitorSpec(**kwargs)


def test_the_settings_refuse_an_unknown_action_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"trainer\.monitors\.floor\.action must be one of warn, checkpoint, stop"):
        FloorSettings(action="halt")  # type: ignore[arg-type]


class NoSettings:
    """A monitor that forgot its ``config_class``."""

    name = "no-settings"

    def __init__(self, settings: object) -> None:
        self.settings = settings

    def check(self, view: HealthView) -> list[Finding]:
        return []


def test_a_monitor_without_settings_class_is_refused_naming_it_and_its_plugin(registered) -> None:
    from rlcore.config import load_config
    from rlcore.controller.health import enabled_monitors

    plugin = types.SimpleNamespace(
        register_health_monitors=rlcore.hookimpl(lambda register: register("no-settings", NoSettings))
    )
    with registered(plugin, name="health-test") as manager:
        with pytest.raises(ConfigError) as caught:
            enabled_monitors(load_config([], [], [], manager), manager.registry)
    assert caught.value.problems == [
        "health_monitor 'no-settings' (health-test): config_class must be a rlcore.api.MonitorSettings subclass, "
        "got None"
    ]
