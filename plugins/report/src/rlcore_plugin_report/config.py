"""The key the report plugin adds to the ``trainer`` section, ``trainer.report``, as a typed section (torch- and
matplotlib-free: the hooks module returns it from ``config_defaults``)."""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.api import Section


@dataclass(frozen=True)
class ReportConfig(Section):
    """rlcore-plugin-report's key of ``trainer``."""

    PATH = "trainer"
    #: write the run's report (report/: a PNG per panel, report.png, index.html) and, for an RL run,
    #: reward_curve.png at its end; false: skip them (a second or more of drawing per run, e.g. in a sweep logged
    #: to a tracker); `rlcore report RUN_DIR` draws them later from the run's directory
    report: bool = True
