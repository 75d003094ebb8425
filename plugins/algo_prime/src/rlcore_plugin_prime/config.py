"""verl's PRIME settings (``recipe/prime``) as typed sections with verl's defaults (torch-free: the hooks
module returns them from ``config_defaults``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlcore.api import OptimConfig, Section, config_ref


@dataclass(frozen=True)
class PrimeAlgorithmConfig(Section):
    """PRIME's keys of ``algorithm``: the weights of its two advantages."""

    PATH = "algorithm"
    #: weight of the implicit process rewards
    reward_dpo_coef: float = 5.0
    #: weight of the outcome (rule) reward
    reward_gt_coef: float = 5.0


@dataclass(frozen=True)
class PrimeModelConfig(Section):
    """``reward_model.model``: how the implicit PRM is trained."""

    #: before | after | none: train the PRM before or after scoring the batch
    update: str = "before"
    #: β of r_t = β·(log π_φ − log π_ref)
    beta_train: float = 0.05
    #: the PRM's loss: cross-entropy of σ(Σ r_t) against the outcome label
    loss_type: str = "ce"
    #: the reference of the implicit PRM: its frozen initial weights
    ref_type: str = "freeze"


@dataclass(frozen=True)
class PrimeOptimConfig(OptimConfig):
    """``reward_model.optim``: the implicit PRM's optimizer and learning-rate schedule, the actor's keys with
    verl's PRM defaults for these two."""

    #: AdamW weight decay
    weight_decay: float = 0.0
    #: gradient-norm clip
    clip_grad: float = 10.0


@dataclass(frozen=True)
class PrimeRewardModelConfig(Section):
    """PRIME's keys of ``reward_model``: the implicit process reward model."""

    PATH = "reward_model"
    #: prompts per PRM optimizer step
    mini_batch_size: Any = config_ref("actor_rollout_ref.actor.ppo_mini_batch_size")
    #: token: a reward per token; whole: their sum on the last token
    prime_granularity: str = "token"
    #: batch_norm: divide by the batch's largest |reward-to-go|; none
    prime_norm: str = "batch_norm"
    #: how the PRM is trained
    model: PrimeModelConfig = field(default_factory=PrimeModelConfig)
    #: the PRM's optimizer
    optim: PrimeOptimConfig = field(default_factory=PrimeOptimConfig)
