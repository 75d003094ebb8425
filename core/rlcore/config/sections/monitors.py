"""``trainer.monitors.<name>``: the settings every run-health monitor has (:class:`MonitorSettings`), which
each monitor's own section extends with its thresholds (kind ``health_monitor``, :mod:`rlcore.api.health`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from rlcore.api.health import ACTIONS, Action
from rlcore.config.sections.base import Section

#: the dotted key under which each monitor's section is mounted (``trainer.monitors.<name>``)
MONITORS_KEY = "trainer.monitors"


@dataclass(frozen=True)
class MonitorSettings(Section):
    """A run-health monitor's section, ``trainer.monitors.<name>``: subclass it, add the monitor's thresholds
    (each field with its default and a ``#:`` docstring), set :attr:`PATH` to ``"trainer.monitors.<name>"``
    and return an instance from the plugin's ``config_defaults`` hook."""

    #: false: the monitor is not built and reads nothing
    enable: bool = True
    #: warn (console line, health/<monitor>/* metrics, a mark in the report) | checkpoint (that, and a checkpoint
    #: saved now) | stop (that, a checkpoint, then the run ends with a non-zero exit status)
    action: Action = "warn"

    def problems(self) -> list[str]:
        """``enable`` must be a bool and ``action`` one of :data:`rlcore.api.health.ACTIONS`."""
        found = []
        if not isinstance(self.enable, bool):
            found.append(f"{self.key('enable')} must be true or false, got {self.enable!r}")
        if self.action not in get_args(Action):
            found.append(f"{self.key('action')} must be one of {', '.join(ACTIONS)}, got {self.action!r}")
        return found
