"""``trainer.tracking.tensorboard``, the TensorBoard tracker's settings, as a typed section (torch-free: the hooks
module returns it from ``config_defaults``). Every setting is null by default, meaning "the environment
variable, else the default" (see :mod:`rlcore_plugin_tensorboard.tracker`)."""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.api import Section


@dataclass(frozen=True)
class TensorboardConfig(Section):
    """``trainer.tracking.tensorboard``: where and how the TensorBoard tracker logs (config wins over the environment)."""

    PATH = "trainer.tracking.tensorboard"
    #: where the event files are written (null: $TENSORBOARD_DIR, else <run_dir>/tensorboard)
    log_dir: str | None = None
