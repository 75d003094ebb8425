"""``actor_rollout_ref``: the policy side (its model, the reference pass; the actor and the rollout have modules of
their own)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlcore.config.sections.actor import ActorConfig, RouterReplayConfig
from rlcore.config.sections.base import Section, ref
from rlcore.config.sections.rollout import RolloutConfig
from rlcore.config.sections.update import LogProbConfig


@dataclass(frozen=True)
class FusedKernelOptions(Section):
    """``actor_rollout_ref.model.fused_kernel_options``: options of use_fused_kernels."""

    #: torch (any device) | triton (torch.compile'd chunks: CUDA + triton)
    impl_backend: str = "torch"


@dataclass(frozen=True)
class MtpConfig(Section):
    """``actor_rollout_ref.model.mtp``: multi-token prediction (verl's MtpConfig; the Megatron backend trains it)."""

    PATH = "actor_rollout_ref.model.mtp"
    #: build the model's MTP layers (the Hugging Face config's num_nextn_predict_layers), load and save their weights
    enable: bool = False
    #: train the MTP layers: their loss, times mtp_loss_scaling_factor, joins the actor's loss (needs enable)
    enable_train: bool = False
    #: the rollout drafts tokens with the MTP layers (vLLM speculative_config, SGLang speculative_*; needs enable)
    enable_rollout: bool = False
    #: stop the MTP loss's gradient at the token embeddings the MTP layers read (Megatron)
    detach_encoder: bool = False
    #: the MTP loss's weight: factor / num MTP layers × each layer's mean cross-entropy over the response tokens
    mtp_loss_scaling_factor: float = 0.1
    #: SGLang's speculative_algorithm
    speculative_algorithm: str = "EAGLE"
    #: SGLang's speculative_num_steps
    speculative_num_steps: int = 3
    #: SGLang's speculative_eagle_topk
    speculative_eagle_topk: int = 1
    #: SGLang's speculative_num_draft_tokens
    speculative_num_draft_tokens: int = 4
    #: vLLM's speculative_config method
    method: str = "mtp"
    #: vLLM's speculative_config num_speculative_tokens
    num_speculative_tokens: int = 1


@dataclass(frozen=True)
class ModelConfig(Section):
    """``actor_rollout_ref.model``: the policy model (the engines read the rest of the section)."""

    PATH = "actor_rollout_ref.model"
    #: HF model name or local directory
    path: str | None = None
    #: null = model.path
    tokenizer_path: str | None = None
    #: a Jinja chat template that replaces the tokenizer's own
    custom_chat_template: str | None = None
    #: let transformers run the model's own code
    trust_remote_code: bool = False
    #: keys that replace the model's Hugging Face config values (set on transformers' config as given)
    override_config: dict[str, Any] = field(default_factory=dict)
    #: recompute activations in the backward pass (less memory, more time)
    enable_gradient_checkpointing: bool = False
    #: pack the sequences of a micro-batch without padding
    use_remove_padding: bool = False
    #: true: saved activations go to host memory during the update (FSDP, DeepSpeed)
    enable_activation_offload: bool = False
    #: true: Liger's Triton kernels (CUDA + liger-kernel; an error elsewhere)
    use_liger: bool = False
    #: true: log-probs/entropy from hidden states in chunks, no full logits (FSDP, DeepSpeed)
    use_fused_kernels: bool = False
    #: options of use_fused_kernels
    fused_kernel_options: FusedKernelOptions = field(default_factory=FusedKernelOptions)
    #: true: load from a copy in /dev/shm, made once per node (removed when no process uses it)
    use_shm: bool = False
    #: LoRA adapters of this rank (0: full fine-tuning)
    lora_rank: int = 0
    #: LoRA's scaling numerator (the update is scaled by lora_alpha / lora_rank)
    lora_alpha: int = 16
    #: LoRA: the modules given adapters (all-linear, or a list of names)
    target_modules: str | list[str] = "all-linear"
    #: LoRA: modules left without adapters: a regex (full match) or a list of names
    exclude_modules: str | list[str] | None = None
    #: LoRA (FSDP): start from the peft adapter saved in this directory; with lora_rank 0 its adapter_config.json
    #: gives the rank
    lora_adapter_path: str | None = None
    #: multi-token prediction (Megatron backend; the rollout's speculative decoding)
    mtp: MtpConfig = field(default_factory=MtpConfig)


@dataclass(frozen=True)
class RefConfig(LogProbConfig):
    """``actor_rollout_ref.ref``: the frozen reference model's log-prob pass."""

    PATH = "actor_rollout_ref.ref"
    #: the reference model's training backend: the actor's (it shares the actor's worker processes; another backend is
    #: rejected)
    strategy: str = ref("actor_rollout_ref.actor.strategy")
    #: true: torch.compile the reference model's forward
    use_torch_compile: bool = ref("actor_rollout_ref.actor.use_torch_compile")
    #: verl's speed switch of the reference (a note: changes nothing in rlcore)
    entropy_from_logits_with_chunking: bool = False
    #: its chunk (a note: changes nothing in rlcore)
    entropy_from_logits_chunk_size: int = 2048
    #: verl's speed switch of the reference (a note: changes nothing in rlcore)
    entropy_checkpointing: bool = False
    #: the reference's forwards pad packed micro-batches as the actor's pad_to_length does
    pad_to_length: bool = ref("actor_rollout_ref.actor.pad_to_length")
    #: the multiple of the reference's pad_to_length, in tokens
    pad_to_length_bucket: int = ref("actor_rollout_ref.actor.pad_to_length_bucket")
    #: deprecated global micro-batch size (divided over the data-parallel ranks)
    log_prob_micro_batch_size: int | None = None
    #: responses per forward pass on one rank (None: the whole batch)
    log_prob_micro_batch_size_per_gpu: int | None = None
    #: micro-batches of balanced token counts instead of fixed row counts
    log_prob_use_dynamic_bsz: bool = ref("actor_rollout_ref.actor.use_dynamic_bsz")
    #: the token budget of a micro-batch with ``log_prob_use_dynamic_bsz``
    log_prob_max_token_len_per_gpu: int = ref("actor_rollout_ref.actor.ppo_max_token_len_per_gpu")
    #: ranks that split each sequence (Ulysses)
    ulysses_sequence_parallel_size: int = ref("actor_rollout_ref.actor.ulysses_sequence_parallel_size")
    #: the reference pass never replays routing (as in verl)
    router_replay: RouterReplayConfig = field(default_factory=RouterReplayConfig)


@dataclass(frozen=True)
class ActorRolloutRefConfig(Section):
    """``actor_rollout_ref``: the policy side (actor, rollout, reference and their model)."""

    PATH = "actor_rollout_ref"
    #: true only (as in verl); separate rollout ranks: trainer.placement=split
    hybrid_engine: bool = True
    #: seconds a collective may wait before the process group gives up
    nccl_timeout: float = 600
    #: the policy model
    model: ModelConfig = field(default_factory=ModelConfig)
    #: the policy update
    actor: ActorConfig = field(default_factory=ActorConfig)
    #: the frozen reference model's log-prob pass
    ref: RefConfig = field(default_factory=RefConfig)
    #: the rollout engine
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
