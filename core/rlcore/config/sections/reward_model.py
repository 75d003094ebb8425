"""``reward_model`` (the reward model worker, the scoring stage, the LLM judge) and ``custom_reward_function``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlcore.config.sections.base import Section, ref


@dataclass(frozen=True)
class RewardModelModelConfig(Section):
    """``reward_model.model``: the discriminative reward model."""

    PATH = "reward_model.model"
    #: a token- or sequence-classification model with one label
    path: str | None = None
    #: the policy's tokenizer; when it differs from the reward model's, responses are re-rendered with the reward
    #: model's chat template
    input_tokenizer: str | None = ref("actor_rollout_ref.model.path")
    #: let transformers run the model's own code
    trust_remote_code: bool = ref("actor_rollout_ref.model.trust_remote_code")
    #: keys that replace the reward model's Hugging Face config values (set on transformers' config as given)
    override_config: dict[str, Any] = field(default_factory=dict)
    #: true: load from a copy in /dev/shm, made once per node
    use_shm: bool = False
    #: verl's packing switch: the reward model runs padded (same scores; true: a note)
    use_remove_padding: bool = False
    #: verl's switch: a reward model computes no log-probs (true: a note)
    use_fused_kernels: bool = False


@dataclass(frozen=True)
class JudgeRolloutConfig(Section):
    """``reward_model.rollout``: the generation engine of reward_manager=judge (an LLM grading responses)."""

    #: rollout engine component (kind `rollout_engine`); the model: reward_model.model.path
    name: str = "hf"
    #: judge prompts are cut to this many tokens (from the left)
    prompt_length: int = 2048
    #: tokens the judge may write (greedy)
    response_length: int = 256
    #: share of the accelerator's memory the judge's engine may fill
    gpu_memory_utilization: float = 0.5
    #: GPUs the judge's engine spans
    tensor_model_parallel_size: int = 1


@dataclass(frozen=True)
class JudgeConfig(Section):
    """``reward_model.judge``: reward_manager=judge: how the judge is asked and its verdict read."""

    #: str.format template with {prompt}, {response}, {ground_truth}; null: built-in
    prompt_template: str | None = None
    #: regex whose first group is the score; null: the last number in the verdict
    verdict_pattern: str | None = None
    #: the verdict's score is divided by this (scores in [0, 1])
    max_score: float = 10.0


@dataclass(frozen=True)
class RewardModelConfig(Section):
    """``reward_model``: the reward model worker and the scoring stage (reward managers read the rest)."""

    PATH = "reward_model"
    #: true: a discriminative reward model scores every response (docs/rewards.md)
    enable: bool = False
    #: training backend that runs the reward model
    strategy: str = ref("actor_rollout_ref.actor.strategy")
    #: true (trainer.executor=ray): the reward model on a pool of its own
    enable_resource_pool: bool = False
    #: ranks per node of that pool (processes per node on CPU)
    n_gpus_per_node: int = 8
    #: nodes of that pool: 0 or trainer.nnodes (every pool spans the same nodes)
    nnodes: int = 0
    #: the discriminative reward model
    model: RewardModelModelConfig = field(default_factory=RewardModelModelConfig)
    #: verl's global size: micro_batch_size_per_gpu = this ÷ the data-parallel ranks
    micro_batch_size: int | None = None
    #: responses per reward-model forward pass (null: the whole batch)
    micro_batch_size_per_gpu: int | None = None
    #: re-rendered inputs longer than this are cut from the left (null: no limit)
    max_length: int | None = None
    #: micro-batches of balanced token counts instead of fixed row counts
    use_dynamic_bsz: bool = ref("critic.use_dynamic_bsz")
    #: the token budget of a micro-batch with ``use_dynamic_bsz``
    forward_max_token_len_per_gpu: int = ref("critic.forward_max_token_len_per_gpu")
    #: verl's reward loop; rlcore always scores in its reward stage (false: a note)
    use_reward_loop: bool = True
    #: the generation engine of reward_manager=judge (an LLM grading responses)
    rollout: JudgeRolloutConfig = field(default_factory=JudgeRolloutConfig)
    #: reward_manager=judge: how the judge is asked and its verdict read
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    #: reward manager component (kind `reward_manager`)
    reward_manager: str = "naive"
    #: keyword arguments passed through to the batch reward manager's scorer (verl's DAPO overlong_buffer_cfg and
    #: max_resp_len here are renamed to reward_model.overlong_buffer.*)
    reward_kwargs: dict[str, Any] = field(default_factory=dict)
    #: true: score a batch while the old/ref log-probs and values are computed
    launch_reward_fn_async: bool = False
    #: seconds per sample; a scorer still running then is killed and scores 0
    scorer_timeout: float | None = 30.0
    #: seconds for one batch's scoring; samples unscored then score 0 (0/null: no bound)
    scorer_batch_timeout: float | None = 600.0
    #: scorer processes scoring a batch concurrently
    scorer_workers: int = 8
    #: true: the first scorer error/timeout/NaN stops the run instead of scoring 0
    scorer_fail_fast: bool = False
    #: bytes of the scorer processes' stdout/stderr shown per batch; the rest is cut (a warning says how much)
    scorer_output_bytes: int = 65536
    #: print this many decoded samples per data source each step
    num_examine: int = 0

    def problems(self) -> list[str]:
        """Counts are positive or non-negative, timeouts are seconds ≥ 0."""
        return (
            self.positive("scorer_workers")
            + self.non_negative("num_examine")
            + self.non_negative("scorer_output_bytes")
            + self.seconds("scorer_timeout")
            + self.seconds("scorer_batch_timeout")
        )


@dataclass(frozen=True)
class CustomRewardFunctionConfig(Section):
    """``custom_reward_function``: TODO."""

    #: a .py file defining the scorer
    path: str | None = None
    #: the scorer function's name in that file
    name: str = "compute_score"
    #: keyword arguments passed through to the scorer function
    reward_kwargs: dict[str, Any] = field(default_factory=dict)
