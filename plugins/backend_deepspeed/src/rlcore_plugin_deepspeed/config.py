"""The ``deepspeed_config`` section (verl's engine key names) as a typed section with its defaults, mounted
under the actor, the reference model and the critic (torch-free: the hooks module returns it from
``config_defaults``)."""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.api import Section


@dataclass(frozen=True)
class DeepSpeedConfig(Section):
    """``<role>.deepspeed_config``: how the DeepSpeed backend partitions and offloads a role's model."""

    #: the ZeRO stage: 1 (optimizer state), 2 (+ gradients) or 3 (+ parameters) partitioned over the ranks
    zero_stage: int = 2
    #: none | cpu (CUDA only): keep the optimizer state (and with ZeRO-3 the parameters) in host memory
    offload: str = "none"
    #: the compute dtype (null: the role's model dtype)
    dtype: str | None = None
