"""The ``wandb`` tracker (verl's alias: ``tracking``): metrics, run metadata and validation tables to W&B.

Settings (``trainer.tracking.wandb``; config wins over the environment, which wins over the default):

``mode``
    ``online`` (needs ``wandb login`` or ``WANDB_API_KEY``), ``offline`` (upload later with ``wandb sync``)
    or ``disabled``. Environment: ``WANDB_MODE``; default ``online``.
``dir``
    the folder under which wandb writes ``wandb/<run>``. Environment: ``WANDB_DIR``; default the run
    directory.
``entity``
    the W&B team or user. Environment: ``WANDB_ENTITY``; default wandb's own (the logged-in user).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from rlcore.api import ExternalTracker, check_choice, numeric_metrics, table_data, tracker_section
from rlcore_plugin_wandb.config import WandbConfig

if TYPE_CHECKING:
    from omegaconf import DictConfig

Mode = Literal["online", "offline", "disabled"]
MODES: tuple[Mode, ...] = ("online", "offline", "disabled")


class WandbTracker(ExternalTracker):
    """Logs to a W&B run; validation generations become a ``wandb.Table`` per step."""

    name: ClassVar[str] = "wandb"
    requires: ClassVar[tuple[str, ...]] = ("wandb",)
    extra: ClassVar[str] = "wandb"

    @classmethod
    def check_settings(cls, config: DictConfig) -> None:
        """``mode`` must be one of :data:`MODES`."""
        mode = tracker_section(config, WandbConfig).chosen_mode()
        check_choice(mode, MODES, "trainer.tracking.wandb.mode (or $WANDB_MODE)")

    def start(self) -> None:
        """``wandb.init`` with the resolved config plus an ``rlcore`` section holding the run metadata.

        ``reinit="create_new"`` leaves any other wandb run of the process alone.
        """
        import wandb

        settings = tracker_section(self.config, WandbConfig)
        self.mode = check_choice(settings.chosen_mode(), MODES, "trainer.tracking.wandb.mode")
        self.dir = settings.chosen_dir(self.run_dir)
        self.run = wandb.init(
            project=self.project,
            name=self.experiment,
            entity=settings.chosen_entity(),
            mode=self.mode,
            dir=self.dir,
            config={**self.config_dict, "rlcore": self.metadata},
            reinit="create_new",
        )

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Log the step's finite numeric metrics."""
        values = numeric_metrics(metrics)
        if values:
            self.run.log(values, step=int(step))

    def log_table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        """Log the rows as a ``wandb.Table`` with a ``step`` column."""
        import wandb

        if not rows:
            return
        columns, data = table_data(rows, step)
        header: list[str | int] = list(columns)
        self.run.log({name: wandb.Table(columns=header, data=data)}, step=int(step))

    def close(self) -> None:
        """Finish the W&B run (in offline mode this prints the ``wandb sync`` line)."""
        self.run.finish()
