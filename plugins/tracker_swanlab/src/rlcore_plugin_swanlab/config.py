"""``trainer.tracking.swanlab``, the SwanLab tracker's settings, as a typed section (torch-free: the hooks
module returns it from ``config_defaults``). Every setting is null by default, meaning "the environment
variable, else the default" (see :mod:`rlcore_plugin_swanlab.tracker`)."""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.api import Section


@dataclass(frozen=True)
class SwanlabConfig(Section):
    """``trainer.tracking.swanlab``: where and how the SwanLab tracker logs (config wins over the environment)."""

    PATH = "trainer.tracking.swanlab"
    #: cloud (alias online) | local | offline | disabled (null: $SWANLAB_MODE, else cloud)
    mode: str | None = None
    #: where the run's folder is written (null: $SWANLAB_LOG_DIR, else <run_dir>/swanlog)
    logdir: str | None = None
