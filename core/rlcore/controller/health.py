"""Run health in the loop: the enabled monitors (kind ``health_monitor``) built once per run, a
:class:`~rlcore.api.health.HealthView` handed to each after every step, and their findings acted on.

:class:`HealthLoop` is what the trainer holds: :meth:`HealthLoop.take_samples` keeps a few decoded
responses of the step when a monitor's spec asks for them (none otherwise, so the default costs nothing),
:meth:`HealthLoop.check` calls the monitors before the step's metrics are logged — it writes
``health/<monitor>/finding`` and ``health/<monitor>/began_at`` into that step's metrics, prints
``health: [<severity>] <monitor>: <message>`` and records the finding in the run's
:attr:`~rlcore.run_context.RunContext.health` (``summary.json``'s ``"health"``) — and returns the
:class:`Actions` the trainer takes once the step is logged: a checkpoint now, or a stop
(:class:`HealthStop`, a non-zero exit after the checkpoint). A monitor that raises is reported naming it and
its plugin, and disabled; the run goes on. ``rlcore health`` (:mod:`rlcore.health_command`) replays a
finished run's metrics through the same :class:`Monitors`. A checkpoint holds the monitors' history
(:meth:`HealthLoop.save`), which a resumed run replays through them silently (:meth:`HealthLoop.load`), so
that stop → resume reports what the uninterrupted run reports.
"""

from __future__ import annotations

import json
import math
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from omegaconf import DictConfig, OmegaConf

from rlcore.api.health import ACTIONS, Finding, HealthView, ResponseSample
from rlcore.config.problems import ConfigError
from rlcore.config.sections.monitors import MONITORS_KEY, MonitorSettings
from rlcore.errors import RLCoreError

if TYPE_CHECKING:
    from rlcore.api.batch import Batch
    from rlcore.api.specs import HealthMonitorSpec
    from rlcore.registry import Component, Registry
    from rlcore.run_context import RunContext

#: the prefix of the metrics the loop writes (``health/<monitor>/finding``, ``health/<monitor>/began_at``)
METRIC_PREFIX = "health/"
#: the checkpoint's file of the monitors' history (:meth:`HealthLoop.save`)
STATE_FILE = "health_history.json"


class HealthStop(RLCoreError):
    """A finding of a monitor whose ``action`` is ``stop``: the run ends, after a checkpoint, with a non-zero
    exit status."""


@dataclass
class Running:
    """One enabled monitor of the run: its component (name, plugin), settings, spec and instance."""

    component: Component[HealthMonitorSpec]
    settings: MonitorSettings
    monitor: Any

    @property
    def name(self) -> str:
        """The monitor's registered name."""
        return self.component.name

    @property
    def provider(self) -> str:
        """The distribution (or plugin) that registered the monitor, as error messages name it."""
        return self.component.dist or self.component.plugin


def settings_of(config: DictConfig, component: Component[HealthMonitorSpec], config_class: Any) -> Any:
    """The monitor's typed section ``trainer.monitors.<name>`` of ``config`` (every problem naming its key);
    the class's defaults when its plugin mounts no section there."""
    path = f"{MONITORS_KEY}.{component.name}"
    if not (isinstance(config_class, type) and issubclass(config_class, MonitorSettings)):
        raise ConfigError(
            f"health_monitor {component.name!r} ({component.dist or component.plugin}): config_class must be a "
            f"rlcore.api.MonitorSettings subclass, got {config_class!r}"
        )
    if OmegaConf.select(config, path, default=None) is None:
        return config_class()
    return config_class.from_tree(config, path)


def unknown_sections(config: DictConfig, registry: Registry) -> list[str]:
    """The problems of the sections under ``trainer.monitors`` that no installed monitor owns (added on
    purpose with ``+trainer.monitors.<x>...``, or left from a run with another plugin set)."""
    node = OmegaConf.select(config, MONITORS_KEY, default=None)
    if not isinstance(node, DictConfig):
        return []
    installed = registry.names("health_monitor")
    known = ", ".join(installed) if installed else "none (pip install rlcore-plugin-health)"
    names = [str(name) for name in node]
    return [
        f"{MONITORS_KEY}.{name}: no health monitor named {name!r} is installed (installed: {known})"
        for name in names
        if not registry.has("health_monitor", name)
    ]


def enabled_monitors(config: DictConfig, registry: Registry) -> list[tuple[Component[HealthMonitorSpec], Any]]:
    """Each installed monitor switched on in ``config`` with its settings, in name order; raises
    :class:`ConfigError` naming every bad key of their sections (and every section no monitor owns)."""
    problems = unknown_sections(config, registry)
    enabled = []
    for component in registry.components("health_monitor"):
        try:
            settings = settings_of(config, component, getattr(component.load(), "config_class", None))
        except ConfigError as exc:
            problems += exc.problems
            continue
        if settings.enable:
            enabled.append((component, settings))
    if problems:
        raise ConfigError(*problems)
    return enabled


def plan_lines(config: DictConfig, registry: Registry) -> list[str]:
    """The dry run's line about run health (the enabled monitors by action), after checking their sections."""
    enabled = enabled_monitors(config, registry)
    if not enabled:
        return []
    by_action = {action: [c.name for c, s in enabled if s.action == action] for action in ACTIONS}
    parts = [f"{action}: {', '.join(names)}" for action, names in by_action.items() if names]
    return [f"run health: {len(enabled)} monitor{'s' if len(enabled) > 1 else ''} ({'; '.join(parts)})"]


def numeric_row(step: int, metrics: Mapping[str, Any]) -> dict[str, float]:
    """``metrics`` as a view's row: numbers as floats (None, as ``metrics.jsonl`` writes a NaN, as NaN), other
    values and the loop's own ``health/*`` keys left out, and ``"step"``."""
    row: dict[str, float] = {}
    for key, value in metrics.items():
        if key.startswith(METRIC_PREFIX) or isinstance(value, str | bytes):
            continue
        if value is None:
            row[key] = math.nan
            continue
        try:
            row[key] = float(value)
        except (TypeError, ValueError):
            continue
    row["step"] = float(step)
    return row


def finding_line(finding: Finding) -> str:
    """The console line of a finding: ``health: [<severity>] <monitor>: <message>``."""
    return f"health: [{finding.severity}] {finding.monitor}: {finding.message}"


def health_lines(findings: Sequence[Mapping[str, Any]]) -> list[str]:
    """The end-of-run summary's lines about run health: how many findings, then one line each (``findings``:
    ``summary.json``'s ``"health"`` rows); none when nothing was found."""
    if not findings:
        return []
    lines = [f"health:        {len(findings)} finding{'s' if len(findings) > 1 else ''}"]
    for row in findings:
        lines.append(f"  step {row['step']} [{row['severity']}] {row['monitor']}: {row['message']}")
    return lines


class Monitors:
    """The run's enabled monitors fed one step at a time: each step's row joins the history, each monitor
    sees a :class:`HealthView`; one that raises is reported and disabled.

    Args:
        running: the enabled monitors, built.
        echo: where the loop's lines go (the console).
    """

    def __init__(self, running: Sequence[Running], echo: Callable[[str], None] = click.echo) -> None:
        self.running = list(running)
        self.echo = echo
        self.history: list[dict[str, float]] = []
        #: the steps of :attr:`history` the monitors checked (the others were only recorded: step 0's validation)
        self.checked: set[float] = set()
        #: the most decoded responses any enabled monitor asks for (0: none is decoded)
        self.samples = max((r.component.spec.samples for r in self.running), default=0)

    @classmethod
    def build(cls, config: DictConfig, registry: Registry, echo: Callable[[str], None] = click.echo) -> Monitors:
        """The enabled monitors of ``config``, built from ``registry``; one whose constructor raises is
        reported and left out."""
        running = []
        for component, settings in enabled_monitors(config, registry):
            try:
                running.append(Running(component, settings, component.load()(settings)))
            except Exception as exc:  # noqa: BLE001 - a broken third-party monitor never costs the run
                echo(_disabled(component.name, component.dist or component.plugin, "could not be built", exc))
        return cls(running, echo)

    def unread(self) -> list[str]:
        """One line per enabled monitor whose spec's ``reads`` match no key of any row so far: the signals the
        run never logged, so that monitor could not judge it."""
        from fnmatch import fnmatchcase

        keys = {key for row in self.history for key in row}
        lines = []
        for running in self.running:
            missing = [p for p in running.component.spec.reads if not any(fnmatchcase(k, p) for k in keys)]
            if missing:
                lines.append(f"health: {running.name} reads {', '.join(missing)}, which the run never logged")
        return lines

    def record(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Add a row that no monitor checks (the validation before training, step 0) to the history."""
        self.history.append(numeric_row(step, metrics))

    def check(
        self, step: int, metrics: Mapping[str, Any], samples: Sequence[ResponseSample] = ()
    ) -> list[tuple[Running, list[Finding]]]:
        """Add the step's row to the history and call every monitor; the findings of each that found any."""
        row = numeric_row(step, metrics)
        self.history.append(row)
        self.checked.add(row["step"])
        history = tuple(self.history)
        found: list[tuple[Running, list[Finding]]] = []
        for running in list(self.running):
            wanted = running.component.spec.samples
            view = HealthView(step=step, metrics=row, history=history, samples=tuple(samples[:wanted]))
            try:
                findings = [_checked(running, finding, step) for finding in running.monitor.check(view)]
            except Exception as exc:  # noqa: BLE001 - a monitor that raises is disabled, the run goes on
                self.running.remove(running)
                self.echo(_disabled(running.name, running.provider, f"raised at step {step}", exc))
                continue
            if findings:
                found.append((running, findings))
        return found

    def replay(self, rows: Sequence[Mapping[str, float]], checked: Iterable[float]) -> None:
        """Feed ``rows`` (a checkpoint's :attr:`history`, oldest first; ``checked``: the steps the monitors
        checked) through the monitors again, their findings dropped: a resumed run's monitors then hold the
        state the interrupted run's held at the checkpoint (samples are not kept, so a monitor that reads
        them sees none for those steps)."""
        steps = set(checked)
        for row in rows:
            step = int(row["step"])
            if row["step"] in steps:
                self.check(step, row)
            else:
                self.record(step, row)

    def state(self) -> dict[str, Any]:
        """What :meth:`replay` needs to rebuild the monitors: the history and the steps checked."""
        return {"history": self.history, "checked": sorted(self.checked)}


def _disabled(name: str, provider: str, what: str, exc: BaseException) -> str:
    """The line reporting a monitor switched off for the rest of the run."""
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" ({where.filename}:{where.lineno})" if where else ""
    return (
        f"health: monitor {name!r} ({provider}) {what}: {type(exc).__name__}: {exc}{at}; it is disabled for the "
        f"rest of the run (trainer.monitors.{name}.enable=false switches it off)"
    )


def _checked(running: Running, finding: Any, step: int) -> Finding:
    """``finding`` when it is a well-formed :class:`Finding` of ``running`` at ``step``; raises naming what is
    wrong otherwise (the monitor is then disabled like one that raised)."""
    if not isinstance(finding, Finding):
        raise TypeError(f"check() returned a {type(finding).__name__}, not a rlcore.api.Finding")
    if finding.step != step or finding.began_at > step:
        raise ValueError(f"a finding of step {finding.step} beginning at {finding.began_at}, checked at step {step}")
    return finding


@dataclass
class Actions:
    """What the trainer does after logging a step with findings: save a checkpoint now, and stop."""

    #: the findings whose monitor's action is ``checkpoint`` or ``stop``
    saving: list[Finding] = field(default_factory=list)
    #: the findings whose monitor's action is ``stop``
    stopping: list[Finding] = field(default_factory=list)

    def stop_error(self, step: int) -> HealthStop | None:
        """The error that ends the run after the checkpoint of ``step`` is saved, naming the finding, or None
        when no monitor stops the run."""
        if not self.stopping:
            return None
        first = self.stopping[0]
        return HealthStop(
            f"run health stopped the run at step {step}: [{first.severity}] {first.monitor}: {first.message} "
            f"(trainer.monitors.{first.monitor}.action=stop; the checkpoint of step {step} is saved)"
        )


class HealthLoop:
    """The trainer's run health: builds the monitors once and, after each step, hands them the step's view and
    acts on their findings (see the module docstring).

    Args:
        config: the run's resolved config.
        registry: the run's registry.
        run: the run, whose :attr:`~rlcore.run_context.RunContext.health` collects the findings.
        echo: where the loop's lines go.
    """

    def __init__(
        self, config: DictConfig, registry: Registry, run: RunContext, echo: Callable[[str], None] | None = None
    ) -> None:
        self.echo = echo or _console_line
        self.monitors = Monitors.build(config, registry, self.echo)
        self.run = run
        self.samples: tuple[ResponseSample, ...] = ()

    def take_samples(
        self, batch: Batch, decode: Callable[[Batch], tuple[list[str], list[str]]], extra_keys: Iterable[str]
    ) -> None:
        """Keep the step's responses the monitors ask for (rows spread over the batch), decoded; nothing is
        decoded when no enabled monitor asks."""
        wanted = min(self.monitors.samples, len(batch))
        if wanted == 0:
            return
        import numpy as np

        rows = np.linspace(0, len(batch) - 1, wanted).round().astype(int)
        picked = batch[rows]
        prompts, responses = decode(picked)
        scores = picked["token_level_scores"].sum(-1).tolist()
        lengths = picked["response_mask"].sum(-1).tolist()
        extras = {key: list(picked[key]) for key in extra_keys if key in picked.non_tensors}
        self.samples = tuple(
            ResponseSample(
                prompt=prompts[i],
                response=responses[i],
                score=float(scores[i]),
                response_length=int(lengths[i]),
                extra={key: float(values[i]) for key, values in extras.items() if _is_number(values[i])},
            )
            for i in range(wanted)
        )

    def record(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Add the validation before training (step 0) to the monitors' history."""
        self.monitors.record(step, metrics)

    def save(self, folder: Path) -> None:
        """Write the monitors' history into the checkpoint ``folder`` (:data:`STATE_FILE`; nothing when no
        monitor runs), so that a resumed run's monitors continue where these stopped."""
        if self.monitors.running:
            (folder / STATE_FILE).write_text(json.dumps(self.monitors.state()))

    def load(self, folder: Path) -> None:
        """Rebuild the monitors' state from the checkpoint ``folder``'s history (silently: findings of those
        steps were reported by the run that saved it); a checkpoint without one leaves the monitors fresh."""
        path = folder / STATE_FILE
        if not self.monitors.running or not path.is_file():
            return
        try:
            state = json.loads(path.read_text())
            rows, checked = state["history"], state["checked"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RLCoreError(f"{path}: not a run-health history ({exc})") from exc
        self.monitors.replay(rows, checked)

    def check(self, step: int, metrics: dict[str, Any]) -> Actions:
        """Call the monitors on the step's ``metrics`` (before they are logged), add ``health/<monitor>/*`` to
        them, print and record each finding; the actions to take once the step is logged."""
        samples, self.samples = self.samples, ()
        actions = Actions()
        for running, findings in self.monitors.check(step, metrics, samples):
            metrics[f"{METRIC_PREFIX}{running.name}/finding"] = float(len(findings))
            metrics[f"{METRIC_PREFIX}{running.name}/began_at"] = float(min(f.began_at for f in findings))
            for finding in findings:
                self.echo(finding_line(finding))
                self.run.health.append({**finding.as_dict(), "action": running.settings.action})
                if running.settings.action in ("checkpoint", "stop"):
                    actions.saving.append(finding)
                if running.settings.action == "stop":
                    actions.stopping.append(finding)
        return actions


def _is_number(value: Any) -> bool:
    """Whether ``value`` is a number (numpy scalars included; bools and text are not)."""
    if isinstance(value, bool | str | bytes):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _console_line(text: str) -> None:
    """Print ``text`` above the live progress bar, or plainly without one."""
    from rlcore.tracking.progress import active_console

    console = active_console()
    if console is None:
        click.echo(text)
    else:
        console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)
