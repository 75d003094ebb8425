"""DAPO's keys (verl's names, with verl's defaults except where noted) as typed sections (torch-free: the
hooks module returns them from ``config_defaults``)."""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.api import Section, config_ref


@dataclass(frozen=True)
class OverlongBufferConfig(Section):
    """``reward_model.overlong_buffer``: DAPO's soft overlong punishment."""

    PATH = "reward_model.overlong_buffer"
    #: punish responses that run into the last ``len`` tokens of the maximum response length
    enable: bool = False
    #: the buffer's length in tokens (verl: 0; null = 0.2 of max_response_length)
    len: int | None = None
    #: the penalty at the maximum response length (it grows linearly over the buffer)
    penalty_factor: float = 0.0
    #: log the overlong penalty and its share of the responses
    log: bool = False
    #: rlcore: L_max, read by the reward manager
    max_response_length: int = config_ref("data.max_response_length")


@dataclass(frozen=True)
class FilterGroupsConfig(Section):
    """``algorithm.filter_groups``: DAPO's dynamic sampling (drop groups whose metric does not vary)."""

    PATH = "algorithm.filter_groups"
    #: drop the groups whose metric is the same for every response, and sample more batches to refill
    enable: bool = False
    #: verl: null (a run must set it); acc | score | seq_reward | seq_final_reward | reward (= seq_reward: the
    #: reward before the in-reward KL penalty)
    metric: str = "seq_reward"
    #: verl: 0; null = keep algorithm.max_num_gen_batches
    max_num_gen_batches: int | None = None
