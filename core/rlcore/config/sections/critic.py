"""``critic``: the value model, its update and forward passes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlcore.config.sections.actor import OptimConfig
from rlcore.config.sections.base import Section, ref
from rlcore.config.sections.update import CheckpointConfig, PPOUpdateConfig


@dataclass(frozen=True)
class CriticCheckpointConfig(CheckpointConfig):
    """``critic.checkpoint``."""

    PATH = "critic.checkpoint"
    #: what is saved: ``model``, ``optimizer``, ``extra`` (LR schedule, generators, RNG), ``hf_model`` (actor)
    save_contents: list[str] = field(default_factory=lambda: ["model", "optimizer", "extra"])
    #: what is restored on resume (``hf_model`` is never loaded)
    load_contents: list[str] = field(default_factory=lambda: ["model", "optimizer", "extra"])


@dataclass(frozen=True)
class CriticModelConfig(Section):
    """``critic.model``: the value model (the engines read the rest of the section)."""

    PATH = "critic.model"
    #: the value model's directory (defaults to the policy's)
    path: str | None = ref("actor_rollout_ref.model.path")
    #: the value model's tokenizer (the policy's by default)
    tokenizer_path: str | None = ref("actor_rollout_ref.model.path")
    #: keys that replace the value model's Hugging Face config values (set on transformers' config as given)
    override_config: dict[str, Any] = field(default_factory=dict)
    #: recompute activations in the backward pass
    enable_gradient_checkpointing: bool = False
    #: true: saved activations go to host memory during the update (FSDP, DeepSpeed)
    enable_activation_offload: bool = False
    #: pack the sequences of a micro-batch without padding
    use_remove_padding: bool = False
    #: let transformers run the model's own code
    trust_remote_code: bool = ref("actor_rollout_ref.model.trust_remote_code")
    #: true: load from a copy in /dev/shm, made once per node
    use_shm: bool = False


@dataclass(frozen=True)
class CriticOptimConfig(OptimConfig):
    """``critic.optim``: the critic's optimizer (as the actor's, with a larger learning rate)."""

    #: the critic's learning rate
    lr: float = 1e-05


@dataclass(frozen=True)
class CriticConfig(PPOUpdateConfig):
    """``critic``: the value model's update and forward passes."""

    PATH = "critic"
    #: null = only when the advantage estimator needs a critic
    enable: bool | None = None
    #: training backend component (kind ``training_backend``)
    strategy: str = ref("actor_rollout_ref.actor.strategy")
    #: ranks that split each sequence (Ulysses) in the critic's worker group
    ulysses_sequence_parallel_size: int = 1
    #: with model.use_remove_padding: pad each packed micro-batch at its end up to a multiple of
    #: pad_to_length_bucket tokens (as the actor's pad_to_length)
    pad_to_length: bool = False
    #: the multiple of pad_to_length, in tokens (rounded up to a multiple of ulysses_sequence_parallel_size)
    pad_to_length_bucket: int = 1024
    #: prompts per mini-batch (one optimizer step), times ``rollout.n`` responses
    ppo_mini_batch_size: int = ref("actor_rollout_ref.actor.ppo_mini_batch_size")
    #: deprecated global micro-batch size (divided over the data-parallel ranks)
    ppo_micro_batch_size: int | None = None
    #: responses per micro-batch on one rank (None: the whole mini-batch)
    ppo_micro_batch_size_per_gpu: int | None = None
    #: micro-batches of balanced token counts instead of fixed row counts
    use_dynamic_bsz: bool = ref("actor_rollout_ref.actor.use_dynamic_bsz")
    #: the token budget of an update micro-batch with ``use_dynamic_bsz``
    ppo_max_token_len_per_gpu: int = 32768
    #: deprecated global micro batch of the values pass
    forward_micro_batch_size: int | None = ref("critic.ppo_micro_batch_size")
    #: responses per values forward on one rank (null: all)
    forward_micro_batch_size_per_gpu: int | None = ref("critic.ppo_micro_batch_size_per_gpu")
    #: the token budget of a values micro-batch with ``use_dynamic_bsz``
    forward_max_token_len_per_gpu: int = ref("critic.ppo_max_token_len_per_gpu")
    #: passes over each step's batch
    ppo_epochs: int = ref("actor_rollout_ref.actor.ppo_epochs")
    #: shuffle the batch before each epoch's mini-batches
    shuffle: bool = ref("actor_rollout_ref.actor.shuffle")
    #: gradient-norm clip; verl's optim.clip_grad sets it too
    grad_clip: float | None = ref("critic.optim.clip_grad")
    #: the value clip of the clipped value loss
    cliprange_value: float = 0.5
    #: what the critic's checkpoints hold
    checkpoint: CriticCheckpointConfig = field(default_factory=CriticCheckpointConfig)
    #: how token losses are aggregated (``token-mean``, ``seq-mean-token-sum``, ...)
    loss_agg_mode: str = ref("actor_rollout_ref.actor.loss_agg_mode")
    #: seq-mean-token-sum-norm: the value loss's divisor (null: the padded response length)
    loss_scale_factor: float | None = ref("actor_rollout_ref.actor.loss_scale_factor")
    #: the value model
    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    #: the critic's optimizer (as the actor's, with a larger learning rate)
    optim: CriticOptimConfig = field(default_factory=CriticOptimConfig)
