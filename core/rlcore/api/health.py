"""The run-health contract (kind ``health_monitor``): what a monitor sees after each training step and what it
reports.

A monitor is a class registered by the hook ``register_health_monitors`` with a ``config_class`` (its
:class:`rlcore.api.MonitorSettings` subclass, mounted at ``trainer.monitors.<name>`` by its plugin's
``config_defaults``) and ``__init__(self, settings)``. The controller builds the enabled monitors once per
run and calls :meth:`HealthMonitor.check` with a :class:`HealthView` after every step; each
:class:`Finding` it returns is acted on as the monitor's ``action`` setting says (``warn``, ``checkpoint``,
``stop``). ``rlcore health RUN_DIR`` replays a run's ``metrics.jsonl`` through the same monitors.

Nothing here imports anything but the standard library: :mod:`rlcore.api.kinds` imports it at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

__all__ = ["ACTIONS", "SEVERITIES", "Action", "Finding", "HealthMonitor", "HealthView", "ResponseSample", "Severity"]

#: how bad a finding is: ``"warning"`` (worth a look) or ``"critical"`` (the run is likely wasted)
Severity = Literal["warning", "critical"]
#: what the run does with a monitor's findings: ``"warn"`` (console line, metrics, report mark),
#: ``"checkpoint"`` (that, and a checkpoint saved now), ``"stop"`` (that, then end with a non-zero exit status)
Action = Literal["warn", "checkpoint", "stop"]
#: the severities, mildest first
SEVERITIES: tuple[Severity, ...] = ("warning", "critical")
#: the actions, mildest first
ACTIONS: tuple[Action, ...] = ("warn", "checkpoint", "stop")


@dataclass(frozen=True)
class Finding:
    """One condition a monitor found: which signal, how bad, since when, and the numbers behind it."""

    #: the name of the monitor that found it (its registered name)
    monitor: str
    #: ``"warning"`` or ``"critical"``
    severity: Severity
    #: the metric key or signal name it is about, e.g. ``"actor/entropy"``
    signal: str
    #: one line naming the signal and its values, e.g.
    #: ``"entropy collapsed: actor/entropy 0.021 < 0.05 (was 1.37 at step 3)"``
    message: str
    #: the step at which the condition began
    began_at: int
    #: the step at which it was found (``began_at <= step``)
    step: int
    #: the numbers behind the message, by name
    values: Mapping[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        """The finding as plain JSON data (``summary.json``'s ``"health"`` rows)."""
        return {
            "monitor": self.monitor,
            "severity": self.severity,
            "signal": self.signal,
            "message": self.message,
            "began_at": self.began_at,
            "step": self.step,
            "values": dict(self.values),
        }


@dataclass(frozen=True)
class ResponseSample:
    """One of a step's responses, decoded, for monitors that read text (``HealthMonitorSpec(samples=N)``)."""

    #: the prompt, decoded without padding
    prompt: str
    #: the response, decoded without padding
    response: str
    #: the response's score (its reward before any KL penalty)
    score: float
    #: the response's length in tokens
    response_length: int
    #: that row's numeric ``reward_extra_info`` values, by name (a reward's components)
    extra: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class HealthView:
    """What a monitor sees after one training step."""

    #: the step just finished
    step: int
    #: this step's metrics, verl's names, as written to ``metrics.jsonl`` (validation keys included on
    #: validation steps)
    metrics: Mapping[str, float]
    #: every step's metrics so far, oldest first, this step last; each row has ``"step"``
    history: Sequence[Mapping[str, float]]
    #: a few of this step's responses, decoded; empty unless the monitor's spec asks for samples
    samples: Sequence[ResponseSample] = ()


@runtime_checkable
class HealthMonitor(Protocol):
    """Kind ``health_monitor`` (``trainer.monitors.<name>``): a class whose instances watch a run's signals.

    ``config_class`` is its :class:`rlcore.api.MonitorSettings` subclass (``enable``, ``action`` and the
    monitor's thresholds); the controller builds it as ``cls(settings)`` with that section of the run's config.
    """

    #: the monitor's settings class, a :class:`rlcore.api.MonitorSettings` subclass mounted at
    #: ``trainer.monitors.<name>`` by its plugin's ``config_defaults``
    config_class: ClassVar[type[Any]]
    #: the monitor's name (its registered name; the ``<name>`` of its config section and its metrics)
    name: str

    def __init__(self, settings: Any) -> None:
        """Keep the monitor's typed settings (an instance of its ``config_class``, read from the run's config)."""
        ...

    def check(self, view: HealthView) -> Sequence[Finding]:
        """The conditions that began at this step (none is the usual answer): called once per step, in step
        order. A monitor keeps whatever state it needs; it reports a condition once when it begins, and again
        only if it ends and begins again."""
        ...
