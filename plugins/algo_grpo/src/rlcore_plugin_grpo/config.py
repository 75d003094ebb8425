"""The keys the GRPO plugin adds to the ``algorithm`` section, as a typed section with their defaults
(torch-free: the hooks module returns it from ``config_defaults``)."""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.api import Section


@dataclass(frozen=True)
class GRPOAlgorithmConfig(Section):
    """GRPO's and GDPO's keys of ``algorithm`` (verl's names)."""

    PATH = "algorithm"
    #: divide each group's advantages by its standard deviation (false: Dr. GRPO's unscaled advantages)
    norm_adv_by_std_in_grpo: bool = True
    #: GDPO: the reward components (keys of the dict the reward function returns) normalised one by one
    gdpo_reward_keys: list[str] | None = None
    #: GDPO: the components' weights in the sum (null: all 1)
    gdpo_reward_weights: list[float] | None = None
