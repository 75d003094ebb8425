"""The ``swanlab`` tracker: metrics, run metadata and validation tables to SwanLab (cloud, local or offline).

Settings (``trainer.tracking.swanlab``; config wins over the environment, which wins over the default):

``mode``
    ``cloud`` (alias ``online``; needs ``swanlab login`` or ``SWANLAB_API_KEY``), ``local`` (readable logs
    for ``swanlab watch``, which needs ``pip install 'swanlab[dashboard]'``), ``offline`` (upload later
    with ``swanlab sync``) or ``disabled``. Environment: ``SWANLAB_MODE``; default ``cloud``.
``logdir``
    where the run's folder is written. Environment: ``SWANLAB_LOG_DIR``; default ``<run_dir>/swanlog``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from rlcore.api import ExternalTracker, check_choice, numeric_metrics, table_data, tracker_section
from rlcore_plugin_swanlab.config import SwanlabConfig

if TYPE_CHECKING:
    from omegaconf import DictConfig

MODES = ("cloud", "online", "local", "offline", "disabled")


class SwanlabTracker(ExternalTracker):
    """Logs to a SwanLab run; validation generations become an echarts table per step."""

    name: ClassVar[str] = "swanlab"
    requires: ClassVar[tuple[str, ...]] = ("swanlab",)
    extra: ClassVar[str] = "swanlab"

    @classmethod
    def check_settings(cls, config: DictConfig) -> None:
        """``mode`` must be one of :data:`MODES`."""
        mode = tracker_section(config, SwanlabConfig).chosen_mode()
        check_choice(mode, MODES, "trainer.tracking.swanlab.mode (or $SWANLAB_MODE)")

    def start(self) -> None:
        """``swanlab.init`` with the resolved config plus an ``rlcore`` section holding the run metadata."""
        import swanlab

        settings = tracker_section(self.config, SwanlabConfig)
        self.mode = settings.chosen_mode()
        self.logdir = settings.chosen_logdir(self.run_dir)
        # swanlab's local mode sets SWANLAB_LOG_DIR for the whole process; keep the environment as it was
        previous = os.environ.get("SWANLAB_LOG_DIR")
        try:
            self.run = swanlab.init(
                project=self.project,
                experiment_name=self.experiment,
                mode="online" if self.mode == "cloud" else self.mode,
                logdir=self.logdir,
                config={**self.config_dict, "rlcore": self.metadata},
            )
        finally:
            if previous is None:
                os.environ.pop("SWANLAB_LOG_DIR", None)
            else:
                os.environ["SWANLAB_LOG_DIR"] = previous

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Log the step's finite numeric metrics."""
        values = numeric_metrics(metrics)
        if values:
            self.run.log(values, step=int(step))

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        """Log the rows as a ``swanlab.echarts.Table`` with a ``step`` column."""
        import swanlab

        if not rows:
            return
        columns, data = table_data(rows, step)
        table = swanlab.echarts.Table()
        table.add(columns, data)
        self.run.log({name: table}, step=int(step))

    def close(self) -> None:
        """Finish the SwanLab run (flushes what is buffered)."""
        self.run.finish()
