"""``trainer.tracking.tensorboard``, the TensorBoard tracker's settings, as a typed section (torch-free: the hooks
module returns it from ``config_defaults``). Every setting is null by default, meaning "the environment
variable, else the default" (see :mod:`rlcore_plugin_tensorboard.tracker`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlcore.api import Section, setting_or_env


@dataclass(frozen=True)
class TensorboardConfig(Section):
    """``trainer.tracking.tensorboard``: where and how the TensorBoard tracker logs (config wins over the environment)."""

    PATH = "trainer.tracking.tensorboard"
    #: the folder, inside the run directory, when neither ``log_dir`` nor $TENSORBOARD_DIR is set
    DEFAULT_LOG_DIR = "tensorboard"
    #: where the event files are written (null: $TENSORBOARD_DIR, else <run_dir>/tensorboard)
    log_dir: str | None = None

    def chosen_log_dir(self, run_dir: Path) -> str:
        """``log_dir``, else $TENSORBOARD_DIR, else ``run_dir /`` :attr:`DEFAULT_LOG_DIR`."""
        return str(setting_or_env(self.log_dir, "TENSORBOARD_DIR", run_dir / self.DEFAULT_LOG_DIR))
