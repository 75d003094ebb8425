"""verl's PRIME settings (``recipe/prime``) as typed sections with verl's defaults (torch-free: the hooks
module returns them from ``config_defaults``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlcore.api import Section, config_ref


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
class PrimeOptimConfig(Section):
    """``reward_model.optim``: the implicit PRM's optimizer and learning-rate schedule (verl's names)."""

    #: learning rate
    lr: float = 1.0e-6
    #: warm-up steps (-1: from lr_warmup_steps_ratio)
    lr_warmup_steps: int = -1
    #: warm-up steps as a fraction of the training steps
    lr_warmup_steps_ratio: float = 0.0
    #: the cosine schedule's final learning rate as a fraction of lr
    min_lr_ratio: float = 0.0
    #: the cosine schedule's number of cycles
    num_cycles: float = 0.5
    #: constant | cosine
    lr_scheduler_type: str = "constant"
    #: verl's older name of lr_scheduler_type (null: use lr_scheduler_type)
    warmup_style: str | None = None
    #: AdamW weight decay
    weight_decay: float = 0.0
    #: AdamW betas
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    #: gradient-norm clip
    clip_grad: float = 10.0
    #: optimizer steps of the schedule (-1: the run's)
    total_training_steps: int = -1


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
