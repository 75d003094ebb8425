"""``algorithm``: the advantage estimator, the KL penalty, batch filters, PF-PPO and rollout correction."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcore.config.sections.base import Section


@dataclass(frozen=True)
class KLControlConfig(Section):
    """``algorithm.kl_ctrl``: the controller of the KL penalty in the reward (use_kl_in_reward)."""

    #: fixed | adaptive
    type: str = "fixed"
    #: the KL coefficient (the start value of the adaptive controller)
    kl_coef: float = 0.001
    #: adaptive: steps over which the coefficient adapts
    horizon: int = 10000
    #: adaptive: the KL the coefficient aims at
    target_kl: float = 0.1


@dataclass(frozen=True)
class PFPPOConfig(Section):
    """``algorithm.pf_ppo``: PF-PPO's resampling."""

    #: pow (|score|^weight_pow) | max_min | max_random
    reweight_method: str = "pow"
    #: pow: the exponent of the weights
    weight_pow: float = 2.0


@dataclass(frozen=True)
class RolloutCorrectionConfig(Section):
    """``algorithm.rollout_correction``: train/inference mismatch correction (needs rollout.calculate_log_probs)."""

    #: null | token | sequence: truncated importance weights on the policy loss
    rollout_is: str | None = None
    #: truncation of the weights; "lower_upper" bounds: IcePop (weights outside are 0)
    rollout_is_threshold: float | str = 2.0
    #: divide the truncated weights by their batch mean
    rollout_is_batch_normalize: bool = False
    #: rejection sampling: comma-separated token_k1..3, seq_{sum,mean}_k1..3, seq_max_k2/3
    rollout_rs: str | None = None
    #: one bound per option or one shared (k1: lower_upper ratio bounds)
    rollout_rs_threshold: float | str | list[float] | None = None
    #: true: old_log_probs = the engine's log-probs (no trainer forward pass); IS/RS per micro-batch in the loss.
    #: false (decoupled): the trainer recomputes old_log_probs; with rollout_is this is decoupled PPO
    bypass_mode: bool = False
    #: bypass mode's policy loss: ppo_clip (the policy loss, ratio to the rollout) | reinforce (-w*A*log pi)
    loss_type: str = "ppo_clip"


@dataclass(frozen=True)
class AlgorithmConfig(Section):
    """``algorithm``: the keys of the step the controller reads (estimators and filters get the section)."""

    PATH = "algorithm"
    #: the discount factor of GAE
    gamma: float = 1.0
    #: GAE's lambda
    lam: float = 1.0
    #: advantage estimator component (kind `advantage_estimator`)
    adv_estimator: str = "gae"
    #: a KL penalty to the reference policy in the reward (needs the reference model)
    use_kl_in_reward: bool = False
    #: kl | abs | mse | low_var_kl | k1 | k2 | k3
    kl_penalty: str = "kl"
    #: the controller of the KL penalty in the reward (use_kl_in_reward)
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    #: batch filter components applied after reward, in order
    batch_filters: list[str] = field(default_factory=list)
    #: generation rounds per step while filters leave too few prompts (<=0: no limit)
    max_num_gen_batches: int = 10
    #: PF-PPO: resample each batch by reward reliability (after the advantages)
    use_pf_ppo: bool = False
    #: PF-PPO's resampling
    pf_ppo: PFPPOConfig = field(default_factory=PFPPOConfig)
    #: train/inference mismatch correction (needs rollout.calculate_log_probs)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
