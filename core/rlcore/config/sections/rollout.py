"""``actor_rollout_ref.rollout``: the rollout engine, its sampling, weight sync, multi-turn agent loops and tracing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlcore.config.sections.base import Section, is_number, ref
from rlcore.config.sections.update import LogProbConfig


@dataclass(frozen=True)
class CheckpointEngineConfig(Section):
    """``actor_rollout_ref.rollout.checkpoint_engine``: how the trainer's weights reach the rollout engine
    (verl's section; the transports are components of kind ``weight_transport``: ``naive``, ``delta``, and the
    plugins')."""

    PATH = "actor_rollout_ref.rollout.checkpoint_engine"
    #: the weight transport (kind weight_transport): naive (every tensor, every sync) or delta (only the elements whose bytes changed, in the rollout engine's dtype)
    backend: str = "naive"
    #: the most MiB of gathered weights a sync holds at once (a larger tensor goes alone); null: all at once
    update_weights_bucket_megabytes: float | None = None
    #: the transports' own arguments, by backend name (delta: max_changed_fraction, default 0.5)
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    #: verl's custom backend module: must stay null
    custom_backend_module: str | None = None

    @property
    def bucket_bytes(self) -> int | None:
        """The bucket size in bytes (verl: ``megabytes << 20``), or None for no bound."""
        megabytes = self.update_weights_bucket_megabytes
        return None if megabytes is None else max(1, int(megabytes * 2**20))

    @property
    def delta_max_changed_fraction(self) -> float:
        """``engine_kwargs.delta.max_changed_fraction``: the share of the weights' bytes past which the ``delta``
        transport stops comparing and sends the rest of a sync (default 0.5)."""
        return float(dict(self.engine_kwargs.get("delta") or {}).get("max_changed_fraction", DELTA_MAX_CHANGED))

    def problems(self) -> list[str]:
        """Engine arguments only for the chosen backend (``delta``'s checked here), no custom module, a positive
        bucket size. The backend's name is checked against the installed transports when a run starts."""
        found = []
        for backend, kwargs in self.engine_kwargs.items():
            key = self.key(f"engine_kwargs.{backend}")
            if backend != self.backend:
                found.append(f"{key}: arguments for backend {backend!r}, but {self.key('backend')}={self.backend!r}")
            elif backend == "naive" or not isinstance(kwargs, dict):
                found.append(f"{key}: the naive transport takes no engine arguments, remove them")
            elif backend == "delta":
                found += _delta_problems(key, kwargs)
        if self.custom_backend_module:
            found.append(
                f"{self.key('custom_backend_module')}: custom checkpoint-engine modules are not supported: register a "
                "weight transport in a plugin (register_weight_transports) and name it in backend"
            )
        megabytes = self.update_weights_bucket_megabytes
        if megabytes is not None and not (is_number(megabytes) and megabytes > 0):
            found.append(
                f"{self.key('update_weights_bucket_megabytes')} must be a positive number of megabytes or null "
                f"(no bound), got {megabytes!r}"
            )
        return found


#: the delta transport's default ``max_changed_fraction``
DELTA_MAX_CHANGED = 0.5


def _delta_problems(key: str, kwargs: dict[str, Any]) -> list[str]:
    """The problems of ``engine_kwargs.delta``: only ``max_changed_fraction``, a number in (0, 1]."""
    found = [f"{key}.{name}: unknown delta transport argument (it has max_changed_fraction)" for name in kwargs]
    found = [line for line in found if not line.startswith(f"{key}.max_changed_fraction:")]
    fraction = kwargs.get("max_changed_fraction", DELTA_MAX_CHANGED)
    if not (is_number(fraction) and 0 < fraction <= 1):
        found.append(f"{key}.max_changed_fraction must be a number in (0, 1], got {fraction!r}")
    return found


@dataclass(frozen=True)
class MultiTurnConfig(Section):
    """``actor_rollout_ref.rollout.multi_turn``: multi-turn rollouts with tools and interactions (docs/multi-turn.md)."""

    #: true: samples go through agent loops (default loop tool_agent)
    enable: bool = False
    #: stop a trajectory after this many assistant turns (null: no limit)
    max_assistant_turns: int | None = None
    #: ... after this many tool/interaction replies (null: no limit)
    max_user_turns: int | None = None
    #: tool calls running at once, over all trajectories
    max_parallel_calls: int = 1
    #: characters of a tool response the model sees
    max_tool_response_length: int = 256
    #: left | right | middle
    tool_response_truncate_side: str = "middle"
    #: verl's tool YAML: tools: [{class_name, config, tool_schema}]; the code_interpreter tool refuses hosts that cannot
    #: confine code fully unless its config says allow_unconfined: true (`rlcore sandbox check`)
    tool_config_path: str | None = None
    #: verl's interaction YAML: interaction: [{name, class_name, config}]
    interaction_config_path: str | None = None
    #: tool-call parser (kind `tool_parser`)
    format: str = "hermes"


@dataclass(frozen=True)
class AgentConfig(Section):
    """``actor_rollout_ref.rollout.agent``: agent loops."""

    #: agent loop (kind `agent_loop`) of samples without agent_name; null: tool_agent with multi_turn.enable, else
    #: single_turn
    default_agent_loop: str | None = None


@dataclass(frozen=True)
class TraceConfig(Section):
    """``actor_rollout_ref.rollout.trace``: trace each agent-loop trajectory (docs/multi-turn.md#tracing)."""

    #: null (off) | mlflow (rlcore-plugin-mlflow) | weave (pip install weave)
    backend: str | None = None
    #: add the decoded text next to the token ids of every span
    token2text: bool = False
    #: trace at most this many prompt groups per rollout (null: all)
    max_samples_per_step_per_worker: int | None = None
    #: the tracing backend's project
    project_name: str = ref("trainer.project_name")
    #: the tracing backend's experiment
    experiment_name: str = ref("trainer.experiment_name")


@dataclass(frozen=True)
class ValKwargs(Section):
    """``actor_rollout_ref.rollout.val_kwargs``: the sampling of validation (engines read the rest)."""

    PATH = "actor_rollout_ref.rollout.val_kwargs"
    #: validation's top-k (-1: all tokens)
    top_k: int = -1
    #: validation's nucleus mass
    top_p: float = 1.0
    #: validation sampling temperature (0: greedy)
    temperature: float = 0.0
    #: responses per validation prompt
    n: int = 1
    #: sample during validation (false: greedy)
    do_sample: bool = False

    def problems(self) -> list[str]:
        """``n`` is a positive count."""
        return self.positive("n")


@dataclass(frozen=True)
class RolloutConfig(LogProbConfig):
    """``actor_rollout_ref.rollout``: the keys of the rollout the core reads (the rollout engine gets the
    whole section, its own keys included)."""

    PATH = "actor_rollout_ref.rollout"
    #: rollout engine component (kind `rollout_engine`)
    name: str = "hf"
    #: verl's rollout mode (sync; async is verl's server mode)
    mode: str = "sync"
    #: sampling temperature (log-probs are computed at it too)
    temperature: float = 1.0
    #: sample from the k most likely tokens (-1: all)
    top_k: int = -1
    #: nucleus sampling's probability mass
    top_p: float = 1.0
    #: sample (false: greedy decoding)
    do_sample: bool = True
    #: responses per prompt
    n: int = 1
    #: the engine's sampling seed
    seed: int = 0
    #: the same seed gives the same tokens whatever the rest of the batch: hf decodes each row in a chunk of its
    #: own; vllm runs one request at a time without prefix caching (on CUDA also VLLM_BATCH_INVARIANT=1)
    full_determinism: bool = False
    #: prompt tokens the engine accepts
    prompt_length: int = ref("data.max_prompt_length")
    #: response tokens the engine generates at most
    response_length: int = ref("data.max_response_length")
    #: the dtype the engine serves on CUDA (on CPU: the trainer's)
    dtype: str = "bfloat16"
    #: share of the accelerator's memory the engine may fill (hf: sizes its chunks of rows from what is free;
    #: vLLM/SGLang: their KV cache)
    gpu_memory_utilization: float = 0.5
    #: keep generating after the end-of-sequence token
    ignore_eos: bool = False
    #: true: no CUDA graphs (hf: eager decoding steps; vLLM: enforce_eager; SGLang: disable_cuda_graph)
    enforce_eager: bool = False
    #: batch sizes CUDA graphs are captured for (vLLM: compilation_config.cudagraph_capture_sizes; SGLang:
    #: cuda_graph_bs); null: the engine's own; with enforce_eager it changes nothing; hf: null only
    cudagraph_capture_sizes: list[int] | None = None
    #: put the engine to sleep after generating (its memory goes back to training)
    free_cache_engine: bool = True
    #: how the engine loads its first weights (dummy: random, replaced by the first sync)
    load_format: str = "dummy"
    #: GPUs one engine replica spans (tensor parallelism)
    tensor_model_parallel_size: int = 2
    #: the engine's data-parallel replicas (vLLM/SGLang)
    data_parallel_size: int = 1
    #: MoE experts spread over the engine's GPUs: vllm enable_expert_parallel (= tensor_model_parallel_size on CUDA),
    #: sglang ep_size (divides it); hf: 1 only
    expert_parallel_size: int = 1
    #: vLLM: tokens per scheduler step (null = 8192); hf on CPU: prompt + response tokens resident at once (chunks of
    #: rows; null = one chunk; on CUDA gpu_memory_utilization sizes them)
    max_num_batched_tokens: int | None = 8192
    #: the engine's longest sequence (null: prompt_length + response_length)
    max_model_len: int | None = None
    #: vLLM: sequences per scheduler step
    max_num_seqs: int = 1024
    #: vLLM/SGLang: chunked prefill
    enable_chunked_prefill: bool = True
    #: vLLM/SGLang: prefix caching
    enable_prefix_caching: bool = True
    #: vLLM: its disable_log_stats (no engine statistics); SGLang: log_level error (false: info, with its throughput
    #: lines)
    disable_log_stats: bool = True
    #: the engine returns the log-probs of the tokens it sampled (rollout correction reads them)
    calculate_log_probs: bool = False
    #: R3 (MoE models, hf engine): record each token's routed experts during rollout as the batch's routed_experts
    #: (docs/moe.md)
    enable_rollout_routing_replay: bool = False
    #: deprecated global micro-batch size (divided over the data-parallel ranks)
    log_prob_micro_batch_size: int | None = None
    #: responses per forward pass on one rank (None: the whole batch)
    log_prob_micro_batch_size_per_gpu: int | None = None
    #: micro-batches of balanced token counts instead of fixed row counts
    log_prob_use_dynamic_bsz: bool = ref("actor_rollout_ref.actor.use_dynamic_bsz")
    #: the token budget of a micro-batch with ``log_prob_use_dynamic_bsz``
    log_prob_max_token_len_per_gpu: int = ref("actor_rollout_ref.actor.ppo_max_token_len_per_gpu")
    #: multi-turn training rollouts abort the slowest trajectories once (1 - rate) x size finished (their response is
    #: empty, masked out)
    over_sample_rate: float = 0.0
    #: verl's SGLang memory switch (weights, then KV cache); another value: a note
    multi_stage_wake_up: bool = False
    #: verify after every sync that the engine serves the trainer's weights
    check_weight_sync: bool = True
    #: largest mean |Δ log-prob| of the sync probe (null: 1e-3 fp32, 5e-2 bf16/fp16)
    weight_sync_logprob_tol: float | None = None
    #: true: a sync gathers (and, with LoRA, merges) one tensor at a time, as one-tensor buckets when no bucket size is
    #: set
    layered_summon: bool = False
    #: how weights reach the rollout engine (verl's section; docs/distributed.md)
    checkpoint_engine: CheckpointEngineConfig = field(default_factory=CheckpointEngineConfig)
    #: multi-turn rollouts with tools and interactions (docs/multi-turn.md)
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    #: agent loops
    agent: AgentConfig = field(default_factory=AgentConfig)
    #: trace each agent-loop trajectory (docs/multi-turn.md#tracing)
    trace: TraceConfig = field(default_factory=TraceConfig)
    #: the sampling of validation
    val_kwargs: ValKwargs = field(default_factory=ValKwargs)

    @property
    def sync_bucket_bytes(self) -> int | None:
        """The bucket size of a weight sync in bytes: ``checkpoint_engine.update_weights_bucket_megabytes``, or
        one tensor per bucket with ``layered_summon`` and no size, else None (the whole state dict at once)."""
        bucket = self.checkpoint_engine.bucket_bytes
        return 1 if bucket is None and self.layered_summon else bucket

    def problems(self) -> list[str]:
        """The lengths and ``n`` are positive counts; ``cudagraph_capture_sizes`` is null or a list of them."""
        problems = self.positive("response_length") + self.positive("prompt_length")
        sizes = self.cudagraph_capture_sizes
        if sizes is not None and (
            not isinstance(sizes, list)
            or not sizes
            or not all(isinstance(size, int) and not isinstance(size, bool) and size > 0 for size in sizes)
        ):
            key = self.key("cudagraph_capture_sizes")
            problems.append(f"{key} must be null or a non-empty list of batch sizes >= 1, got {sizes!r}")
        return problems
