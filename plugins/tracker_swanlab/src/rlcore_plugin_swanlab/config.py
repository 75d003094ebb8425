"""``trainer.tracking.swanlab``, the SwanLab tracker's settings, as a typed section (torch-free: the hooks
module returns it from ``config_defaults``). Every setting is null by default, meaning "the environment
variable, else the default" (see :mod:`rlcore_plugin_swanlab.tracker`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlcore.api import Section, setting_or_env


@dataclass(frozen=True)
class SwanlabConfig(Section):
    """``trainer.tracking.swanlab``: where and how the SwanLab tracker logs (config wins over the environment)."""

    PATH = "trainer.tracking.swanlab"
    #: the mode when neither ``mode`` nor $SWANLAB_MODE is set
    DEFAULT_MODE = "cloud"
    #: the folder, inside the run directory, when neither ``logdir`` nor $SWANLAB_LOG_DIR is set
    DEFAULT_LOGDIR = "swanlog"
    #: cloud (alias online) | local | offline | disabled (null: $SWANLAB_MODE, else cloud)
    mode: str | None = None
    #: where the run's folder is written (null: $SWANLAB_LOG_DIR, else <run_dir>/swanlog)
    logdir: str | None = None

    def chosen_mode(self) -> str:
        """``mode``, else $SWANLAB_MODE, else :attr:`DEFAULT_MODE` (unchecked: the tracker checks the choice)."""
        return str(setting_or_env(self.mode, "SWANLAB_MODE", self.DEFAULT_MODE))

    def chosen_logdir(self, run_dir: Path) -> str:
        """``logdir``, else $SWANLAB_LOG_DIR, else ``run_dir /`` :attr:`DEFAULT_LOGDIR`."""
        return str(setting_or_env(self.logdir, "SWANLAB_LOG_DIR", run_dir / self.DEFAULT_LOGDIR))
