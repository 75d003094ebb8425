"""The run-health monitor ``{{ cookiecutter.hyphenated }}`` (``trainer.monitors.{{ cookiecutter.hyphenated }}``).

What it does: after every training step rlcore hands it a :class:`rlcore.api.HealthView` (the step's
metrics as ``metrics.jsonl`` holds them, and every earlier step's); it reports a warning when the training
score ``critic/score/mean`` falls more than ``drop`` below its best so far, once when the fall begins and
again only after the score has recovered and fallen again. rlcore acts on the finding as the section's
``action`` says: ``warn`` (a console line, ``health/{{ cookiecutter.hyphenated }}/finding`` in the metrics, a
mark in the report), ``checkpoint`` (that, and a checkpoint saved now) or ``stop`` (that, a checkpoint, and
the run ends with a non-zero exit status).

What to change: the signal, the condition and the thresholds. Each threshold is a field of
:class:`Settings` with its default and a ``#:`` docstring (``rlcore config show`` prints it); declare in
the spec (``hooks.py``) the metric keys the monitor reads, and ``samples=N`` to get decoded responses in
``view.samples``. Never raise on odd input: a monitor that raises is switched off for the rest of the run.
``tests/test_health_monitor.py`` runs rlcore's contract suite.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.api import Finding, HealthView, MonitorSettings

#: the metric the monitor reads
SIGNAL = "critic/score/mean"


@dataclass(frozen=True)
class Settings(MonitorSettings):
    """``trainer.monitors.{{ cookiecutter.hyphenated }}``: when a fall of the training score is a finding."""

    PATH = "trainer.monitors.{{ cookiecutter.hyphenated }}"

    #: a finding when critic/score/mean is more than this below its best so far
    drop: float = 0.3
    #: steps the score must have been logged before the monitor judges it
    min_steps: int = 3

    def problems(self) -> list[str]:
        """The base checks, plus ``drop`` > 0 and ``min_steps`` >= 1."""
        found = super().problems()
        if not isinstance(self.drop, int | float) or self.drop <= 0:
            found.append(f"{self.key('drop')} must be a number > 0, got {self.drop!r}")
        return found + self.positive("min_steps")


class ScoreDrop:
    """Reports a fall of the training score below its best so far.

    Args:
        settings: the monitor's section of the run's config.
    """

    config_class = Settings
    name = "{{ cookiecutter.hyphenated }}"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.best: tuple[float, int] | None = None
        self.seen = 0
        self.falling = False

    def check(self, view: HealthView) -> list[Finding]:
        """A finding at the step the score falls more than ``drop`` below its best; none while it stays down."""
        score = view.metrics.get(SIGNAL)
        if score is None:
            return []
        self.seen += 1
        if self.best is None or score > self.best[0]:
            self.best = (score, view.step)
        best, best_step = self.best
        fell = self.seen >= self.settings.min_steps and score < best - self.settings.drop
        began = fell and not self.falling
        self.falling = fell
        if not began:
            return []
        message = f"training score fell: {SIGNAL} {score:.3g} < {best:.3g} - {self.settings.drop} (best at step {best_step})"
        return [
            Finding(
                monitor=self.name,
                severity="warning",
                signal=SIGNAL,
                message=message,
                began_at=view.step,
                step=view.step,
                values={SIGNAL: score, "best": best, "best_step": float(best_step)},
            )
        ]
