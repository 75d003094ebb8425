"""``trainer.tracking.wandb``, the W&B tracker's settings, as a typed section (torch-free: the hooks
module returns it from ``config_defaults``). Every setting is null by default, meaning "the environment
variable, else the default" (see :mod:`rlcore_plugin_wandb.tracker`)."""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.api import Section


@dataclass(frozen=True)
class WandbConfig(Section):
    """``trainer.tracking.wandb``: where and how the W&B tracker logs (config wins over the environment)."""

    PATH = "trainer.tracking.wandb"
    #: online | offline | disabled (null: $WANDB_MODE, else online)
    mode: str | None = None
    #: the folder under which wandb writes wandb/<run> (null: $WANDB_DIR, else the run directory)
    dir: str | None = None
    #: the W&B team or user (null: $WANDB_ENTITY, else wandb's own: the logged-in user)
    entity: str | None = None
