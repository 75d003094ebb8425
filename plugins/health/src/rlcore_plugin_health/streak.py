"""When a monitor reports: a condition is reported once, when it has held for ``patience`` checks in a row,
and again only after it has ended and begun again (the contract of ``HealthMonitor.check``)."""

from __future__ import annotations


class Streak:
    """One condition's state across steps: the step its current run of checks began at, and whether that
    run has been reported."""

    def __init__(self, patience: int = 1) -> None:
        """``patience``: checks in a row the condition must hold before it is reported (at least 1)."""
        self.patience = max(1, int(patience))
        self.began_at: int | None = None
        self.length = 0
        self.reported = False

    def update(self, holds: bool, step: int, began_at: int | None = None) -> int | None:
        """Record this step's check; return the step the condition began at when it is to be reported now
        (it has held ``patience`` checks in a row and this run was not reported yet), else None. ``began_at``
        overrides where a run that starts now began (e.g. the start of a trend's window)."""
        if not holds:
            self.began_at, self.length, self.reported = None, 0, False
            return None
        if self.began_at is None:
            self.began_at = step if began_at is None else min(began_at, step)
        self.length += 1
        if self.reported or self.length < self.patience:
            return None
        self.reported = True
        return self.began_at
