"""The plugin's config section, ``reward_model.sandbox``, mounted there by its ``config_defaults`` hook."""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.api import Section


@dataclass(frozen=True)
class SandboxConfig(Section):
    """``reward_model.sandbox``: code rewards (data_source codecontests, apps, ...)."""

    PATH = "reward_model.sandbox"

    #: true: run them where the kernel cannot confine the code fully (`rlcore sandbox check`); false: the run refuses
    #: there, saying what is not enforced
    allow_unconfined: bool = False
