"""``trainer.tracking.wandb``, the W&B tracker's settings, as a typed section (torch-free: the hooks
module returns it from ``config_defaults``). Every setting is null by default, meaning "the environment
variable, else the default" (see :mod:`rlcore_plugin_wandb.tracker`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlcore.api import Section, setting_or_env


@dataclass(frozen=True)
class WandbConfig(Section):
    """``trainer.tracking.wandb``: where and how the W&B tracker logs (config wins over the environment)."""

    PATH = "trainer.tracking.wandb"
    #: the mode when neither ``mode`` nor $WANDB_MODE is set
    DEFAULT_MODE = "online"
    #: online | offline | disabled (null: $WANDB_MODE, else online)
    mode: str | None = None
    #: the folder under which wandb writes wandb/<run> (null: $WANDB_DIR, else the run directory)
    dir: str | None = None
    #: the W&B team or user (null: $WANDB_ENTITY, else wandb's own: the logged-in user)
    entity: str | None = None

    def chosen_mode(self) -> str:
        """``mode``, else $WANDB_MODE, else :attr:`DEFAULT_MODE` (unchecked: the tracker checks the choice)."""
        return str(setting_or_env(self.mode, "WANDB_MODE", self.DEFAULT_MODE))

    def chosen_dir(self, run_dir: Path) -> str:
        """``dir``, else $WANDB_DIR, else ``run_dir``."""
        return str(setting_or_env(self.dir, "WANDB_DIR", run_dir))

    def chosen_entity(self) -> str | None:
        """``entity``, else $WANDB_ENTITY, else None (wandb's own: the logged-in user)."""
        return setting_or_env(self.entity, "WANDB_ENTITY", None)
