"""``actor_rollout_ref.actor``: the policy update, its loss, optimizer, checkpoint and routing replay."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcore.config.sections.base import Section, ref
from rlcore.config.sections.update import CheckpointConfig, PPOUpdateConfig


@dataclass(frozen=True)
class PolicyLossConfig(Section):
    """``actor_rollout_ref.actor.policy_loss``: the policy loss and its parameters."""

    #: policy loss component (kind `policy_loss`)
    loss_mode: str = "vanilla"
    #: clip_cov: share of tokens whose gradient is clipped
    clip_cov_ratio: float = 0.0002
    #: clip_cov: lower bound of the covariance window
    clip_cov_lb: float = 1.0
    #: clip_cov: upper bound of the covariance window
    clip_cov_ub: float = 5.0
    #: kl_cov: share of tokens given the KL penalty
    kl_cov_ratio: float = 0.0002
    #: kl_cov: weight of that penalty
    ppo_kl_coef: float = 0.1


@dataclass(frozen=True)
class ActorCheckpointConfig(CheckpointConfig):
    """``actor_rollout_ref.actor.checkpoint``."""

    PATH = "actor_rollout_ref.actor.checkpoint"
    #: hf_model: a Hugging Face export in actor/huggingface
    save_contents: list[str] = field(default_factory=lambda: ["model", "optimizer", "extra", "hf_model"])
    #: what is restored on resume (``hf_model`` is never loaded)
    load_contents: list[str] = field(default_factory=lambda: ["model", "optimizer", "extra"])
    #: true is not supported (rejected)
    async_save: bool = False
    #: false (verl's lenient export): the Megatron engine skips the Hugging Face weights it has no counterpart for
    #: (MTP layers, ...) with a warning, and its export omits them; an error on FSDP, which keeps every weight
    strict: bool = True


@dataclass(frozen=True)
class OptimConfig(Section):
    """``actor_rollout_ref.actor.optim``: the actor's optimizer (AdamW) and learning-rate schedule."""

    #: the learning rate
    lr: float = 1e-06
    #: -1 = use lr_warmup_steps_ratio
    lr_warmup_steps: int = -1
    #: warm-up steps as a share of the training steps
    lr_warmup_steps_ratio: float = 0.0
    #: cosine schedule: the final learning rate as a share of lr
    min_lr_ratio: float = 0.0
    #: cosine schedule: the number of half-waves
    num_cycles: float = 0.5
    #: constant | cosine
    lr_scheduler_type: str = "constant"
    #: deprecated alias of lr_scheduler_type
    warmup_style: str | None = None
    #: AdamW's weight decay
    weight_decay: float = 0.01
    #: AdamW's betas
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    #: gradient-norm clip (grad_clip follows it)
    clip_grad: float = 1.0
    #: filled in by the controller
    total_training_steps: int = -1
    #: verl's Megatron schedule (docs/from-verl.md): constant | linear | cosine | inverse-square-root | WSD; null
    #: = lr_scheduler_type's schedule, or linear when another of these Megatron keys is set
    lr_decay_style: str | None = None
    #: Megatron schedule: the rate the decay ends at (null: 0)
    min_lr: float | None = None
    #: Megatron schedule: the rate the warm-up starts from (null: 0)
    lr_warmup_init: float | None = None
    #: Megatron schedule: the step the decay reaches min_lr (null: total_training_steps)
    lr_decay_steps: int | None = None
    #: Megatron schedule: constant | linear | cosine; verl gives the start and end weight decay the same value,
    #: so every style keeps weight_decay (null: constant)
    weight_decay_incr_style: str | None = None
    #: Megatron WSD schedule: the annealing shape, linear | cosine | exponential | minus_sqrt (null: exponential)
    lr_wsd_decay_style: str | None = None
    #: Megatron WSD schedule: the annealing steps at the end of lr_decay_steps
    lr_wsd_decay_steps: int | None = None
    #: Megatron schedule: on resume, the checkpoint's schedule values win over this config's (false: the
    #: config's, with the checkpoint's step count)
    use_checkpoint_opt_param_scheduler: bool = False


@dataclass(frozen=True)
class RouterReplayConfig(Section):
    """``actor_rollout_ref.actor.router_replay``: mixture-of-experts routing replay in the training forward
    (docs/moe.md)."""

    #: disabled | R2 (log-prob pass records, update replays) | R3 (rollout records, both replay)
    mode: str = "disabled"
    #: declared by verl, read nowhere: null only
    record_file: str | None = None
    #: declared by verl, read nowhere: null only
    replay_file: str | None = None


@dataclass(frozen=True)
class ActorConfig(PPOUpdateConfig):
    """``actor_rollout_ref.actor``: the policy update (the loss keys are read by the policy loss)."""

    PATH = "actor_rollout_ref.actor"
    #: training backend component (kind `training_backend`)
    strategy: str = "fsdp"
    #: in prompts; multiplied by rollout.n
    ppo_mini_batch_size: int = 256
    #: deprecated in verl: global micro batch
    ppo_micro_batch_size: int | None = None
    #: responses per micro-batch on one rank (None: the whole mini-batch)
    ppo_micro_batch_size_per_gpu: int | None = None
    #: micro-batches of balanced token counts instead of fixed row counts
    use_dynamic_bsz: bool = False
    #: the token budget of an update micro-batch with ``use_dynamic_bsz``
    ppo_max_token_len_per_gpu: int = 16384
    #: gradient-norm clip; verl's optim.clip_grad sets it too
    grad_clip: float | None = ref("actor_rollout_ref.actor.optim.clip_grad")
    #: the PPO clip range of the ratio (both sides unless the next two are set)
    clip_ratio: float = 0.2
    #: the lower clip range (1 - low)
    clip_ratio_low: float = 0.2
    #: the upper clip range (1 + high; DAPO's clip-higher)
    clip_ratio_high: float = 0.2
    #: dual-clip PPO: the bound of the ratio for negative advantages
    clip_ratio_c: float = 3.0
    #: how token losses are aggregated (``token-mean``, ``seq-mean-token-sum``, ...)
    loss_agg_mode: str = "token-mean"
    #: seq-mean-token-sum-norm: the loss's divisor (null: the padded response length)
    loss_scale_factor: float | None = None
    #: weight of the entropy bonus (0: no entropy in the loss)
    entropy_coeff: float = 0.0
    #: true: old-log-prob pass also returns Σπ² (optimal_token_baseline needs it)
    calculate_sum_pi_squared: bool = False
    #: a KL term to the reference policy in the loss (needs the reference model)
    use_kl_loss: bool = False
    #: weight of the KL loss (use_kl_loss)
    kl_loss_coef: float = 0.001
    #: the KL estimator of the KL loss (kl, abs, mse, low_var_kl, k1..k3)
    kl_loss_type: str = "low_var_kl"
    #: passes over each step's batch
    ppo_epochs: int = 1
    #: shuffle the batch before each epoch's mini-batches
    shuffle: bool = False
    #: seed of the update's shuffling generator (actor and critic)
    data_loader_seed: int = 42
    #: true: the actor's forwards compute each prompt once for its n responses (FSDP, DeepSpeed)
    use_prefix_grouper: bool = False
    #: ranks that split each sequence (Ulysses); data-parallel size = world / it
    ulysses_sequence_parallel_size: int = 1
    #: true: the vision encoder of a vision-language model does not train (FSDP)
    freeze_vision_tower: bool = False
    #: true: torch.compile the model's forward
    use_torch_compile: bool = False
    #: verl's speed switch: entropy in chunks (a note: changes nothing in rlcore)
    entropy_from_logits_with_chunking: bool = False
    #: verl's chunk of entropy_from_logits_with_chunking (a note: changes nothing in rlcore)
    entropy_from_logits_chunk_size: int = 2048
    #: verl's speed switch: recompute the entropy (a note: changes nothing in rlcore)
    entropy_checkpointing: bool = False
    #: with model.use_remove_padding: pad each packed micro-batch at its end up to a multiple of
    #: pad_to_length_bucket tokens, so that kernels see few shapes (FSDP, DeepSpeed; same numbers)
    pad_to_length: bool = False
    #: the multiple of pad_to_length, in tokens (rounded up to a multiple of ulysses_sequence_parallel_size)
    pad_to_length_bucket: int = 1024
    #: the policy loss and its parameters
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    #: what the actor's checkpoints hold
    checkpoint: ActorCheckpointConfig = field(default_factory=ActorCheckpointConfig)
    #: the actor's optimizer (AdamW) and learning-rate schedule
    optim: OptimConfig = field(default_factory=OptimConfig)
    #: mixture-of-experts routing replay in the training forward (docs/moe.md)
    router_replay: RouterReplayConfig = field(default_factory=RouterReplayConfig)
