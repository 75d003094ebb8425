"""Typed views of the config sections the core reads, with verl's key names.

``defaults.yaml`` stays the user-facing reference and the one place of defaults: these dataclasses have no
defaults of their own. :meth:`Sections.from_tree` builds them from the resolved OmegaConf tree (every
field must be a key there), checks each :data:`~typing.Literal` choice, and runs each section's
``__post_init__`` checks; every problem names its dotted key, and all of them are reported at once.

Convention: a field's docstring is the ``#:`` comment above it (Sphinx's attribute-comment syntax). The
sections cover the keys of the core (workers, controller); plugin sections (a backend's ``fsdp_config``,
Megatron's, a preset's) keep their own schemas and are read from the tree.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, ClassVar, Literal, TypeVar

from omegaconf import DictConfig, ListConfig, OmegaConf

from rlcore.api.training import ENGINE_CONTENTS
from rlcore.config.problems import ConfigError

#: what a checkpoint may contain (``checkpoint.save_contents`` / ``load_contents``); ``hf_model`` (a Hugging
#: Face export of the weights) is written by the actor only and never loaded
CHECKPOINT_CONTENTS: tuple[str, ...] = (*ENGINE_CONTENTS, "extra", "hf_model")

#: how a prompt longer than ``data.max_prompt_length`` is handled
Truncation = Literal["left", "right", "middle", "error"]

_S = TypeVar("_S", bound="Section")


def _is_count(value: Any) -> bool:
    """Whether ``value`` is an int (a bool is not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """Whether ``value`` is an int or a float (a bool is not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Section:
    """A config section as a dataclass: :attr:`PATH` is its dotted key, :meth:`problems` its own checks."""

    #: the dotted key of the section in the tree (``actor_rollout_ref.actor``)
    PATH: ClassVar[str] = ""

    def key(self, name: str) -> str:
        """The dotted key of field ``name``."""
        return f"{self.PATH}.{name}"

    def problems(self) -> list[str]:
        """This section's per-field problems (none by default); ``__post_init__`` raises them."""
        return []

    def __post_init__(self) -> None:
        """Raise one :class:`ConfigError` with every problem of :meth:`problems`."""
        found = self.problems()
        if found:
            raise ConfigError(*found)

    def positive(self, name: str, *, null: bool = False) -> list[str]:
        """The problem of field ``name`` when it is not an int ≥ 1 (``null``: None is allowed)."""
        value = getattr(self, name)
        if (value is None and null) or (_is_count(value) and value > 0):
            return []
        return [f"{self.key(name)} must be a positive integer{' or null' if null else ''}, got {value!r}"]

    def non_negative(self, name: str) -> list[str]:
        """The problem of field ``name`` when it is not an int ≥ 0."""
        value = getattr(self, name)
        if _is_count(value) and value >= 0:
            return []
        return [f"{self.key(name)} must be an integer >= 0, got {value!r}"]

    def seconds(self, name: str) -> list[str]:
        """The problem of field ``name`` when it is neither null nor a number of seconds ≥ 0."""
        value = getattr(self, name)
        if value is None or (_is_number(value) and value >= 0):
            return []
        return [f"{self.key(name)} must be a number of seconds >= 0 (0 or null: no limit), got {value!r}"]

    @classmethod
    def from_tree(cls: type[_S], config: DictConfig) -> _S:
        """The section at :attr:`PATH` of the resolved ``config``; raises :class:`ConfigError` naming every
        missing key, bad choice and failed check of the section and its subsections."""
        node = OmegaConf.select(config, cls.PATH, default=None)
        if not isinstance(node, DictConfig):
            raise ConfigError(f"{cls.PATH} is missing from the config (it is a section of defaults.yaml)")
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        problems: list[str] = []
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            kind = hints[field.name]
            key = f"{cls.PATH}.{field.name}"
            if isinstance(kind, type) and issubclass(kind, Section):
                try:
                    values[field.name] = kind.from_tree(config)
                except ConfigError as exc:
                    problems += exc.problems
                continue
            if field.name not in node:
                problems.append(f"{key} is missing from the config (defaults.yaml declares it)")
                continue
            value = node[field.name]
            if isinstance(value, (DictConfig, ListConfig)):
                value = OmegaConf.to_container(value, resolve=True)
            choices = typing.get_args(kind) if typing.get_origin(kind) is Literal else ()
            if choices and value not in choices:
                problems.append(f"{key} must be one of {', '.join(map(str, choices))}, got {value!r}")
            values[field.name] = value
        if problems:
            raise ConfigError(*problems)
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class CheckpointConfig(Section):
    """``<role>.checkpoint``: what a worker checkpoint holds (see :mod:`rlcore.workers.base`)."""

    #: what is saved: ``model``, ``optimizer``, ``extra`` (LR schedule, generators, RNG), ``hf_model`` (actor)
    save_contents: list[str]
    #: what is restored on resume (``hf_model`` is never loaded)
    load_contents: list[str]

    def problems(self) -> list[str]:
        """Both lists name only :data:`CHECKPOINT_CONTENTS`."""
        found = []
        for name in ("save_contents", "load_contents"):
            unknown = sorted(set(getattr(self, name)) - set(CHECKPOINT_CONTENTS))
            if unknown:
                found.append(
                    f"{self.key(name)} has unknown item(s) {unknown}; allowed: {', '.join(CHECKPOINT_CONTENTS)}"
                )
        return found


@dataclasses.dataclass(frozen=True)
class ActorCheckpointConfig(CheckpointConfig):
    """``actor_rollout_ref.actor.checkpoint``."""

    PATH = "actor_rollout_ref.actor.checkpoint"


@dataclasses.dataclass(frozen=True)
class CriticCheckpointConfig(CheckpointConfig):
    """``critic.checkpoint``."""

    PATH = "critic.checkpoint"


@dataclasses.dataclass(frozen=True)
class ModelConfig(Section):
    """``actor_rollout_ref.model``: the policy model (the engines read the rest of the section)."""

    PATH = "actor_rollout_ref.model"
    #: Hugging Face model directory or hub name
    path: str | None
    #: the tokenizer's directory (None: :attr:`path`)
    tokenizer_path: str | None
    #: a Jinja chat template that replaces the tokenizer's own
    custom_chat_template: str | None
    #: let transformers run the model's own code
    trust_remote_code: bool


@dataclasses.dataclass(frozen=True)
class PPOUpdateConfig(Section):
    """The update keys the actor and the critic share (verl's names); batch sizes count prompts
    (``ppo_mini_batch_size``) or responses on one rank (``*_per_gpu``), see :mod:`rlcore.config.batch_sizes`."""

    #: training backend component (kind ``training_backend``)
    strategy: str
    #: prompts per mini-batch (one optimizer step), times ``rollout.n`` responses
    ppo_mini_batch_size: int
    #: deprecated global micro-batch size (divided over the data-parallel ranks)
    ppo_micro_batch_size: int | None
    #: responses per micro-batch on one rank (None: the whole mini-batch)
    ppo_micro_batch_size_per_gpu: int | None
    #: micro-batches of balanced token counts instead of fixed row counts
    use_dynamic_bsz: bool
    #: the token budget of an update micro-batch with ``use_dynamic_bsz``
    ppo_max_token_len_per_gpu: int
    #: passes over each step's batch
    ppo_epochs: int
    #: shuffle the batch before each epoch's mini-batches
    shuffle: bool
    #: gradient-norm clip (None: no clip)
    grad_clip: float | None
    #: how token losses are aggregated (``token-mean``, ``seq-mean-token-sum``, ...)
    loss_agg_mode: str
    #: ranks that split each sequence (Ulysses)
    ulysses_sequence_parallel_size: int

    def problems(self) -> list[str]:
        """The loss aggregation mode must be known."""
        from rlcore.config.algorithm_names import LOSS_AGG_MODES

        if self.loss_agg_mode in LOSS_AGG_MODES:
            return []
        return [
            f"unknown {self.key('loss_agg_mode')} {self.loss_agg_mode!r}; expected one of: {', '.join(LOSS_AGG_MODES)}"
        ]


@dataclasses.dataclass(frozen=True)
class ActorConfig(PPOUpdateConfig):
    """``actor_rollout_ref.actor``: the policy update (the loss keys are read by the policy loss)."""

    PATH = "actor_rollout_ref.actor"
    #: weight of the entropy bonus (0: no entropy in the loss)
    entropy_coeff: float
    #: the old-log-prob pass also returns Σπ² (the optimal token baseline reads it)
    calculate_sum_pi_squared: bool
    #: seed of the update's shuffling generator (actor and critic)
    data_loader_seed: int
    #: the actor's forwards compute each prompt once for its ``rollout.n`` responses
    use_prefix_grouper: bool
    #: a KL term to the reference policy in the loss (needs the reference model)
    use_kl_loss: bool
    checkpoint: ActorCheckpointConfig


@dataclasses.dataclass(frozen=True)
class LogProbConfig(Section):
    """The micro-batching of a log-prob pass (rollout: old log-probs; ref: reference log-probs)."""

    #: deprecated global micro-batch size (divided over the data-parallel ranks)
    log_prob_micro_batch_size: int | None
    #: responses per forward pass on one rank (None: the whole batch)
    log_prob_micro_batch_size_per_gpu: int | None
    #: micro-batches of balanced token counts instead of fixed row counts
    log_prob_use_dynamic_bsz: bool
    #: the token budget of a micro-batch with ``log_prob_use_dynamic_bsz``
    log_prob_max_token_len_per_gpu: int


@dataclasses.dataclass(frozen=True)
class RefConfig(LogProbConfig):
    """``actor_rollout_ref.ref``: the frozen reference model's log-prob pass."""

    PATH = "actor_rollout_ref.ref"
    #: the reference engine's training backend (kind ``training_backend``; the actor's backend under any name)
    strategy: str
    #: ranks that split each sequence (Ulysses)
    ulysses_sequence_parallel_size: int


@dataclasses.dataclass(frozen=True)
class ValKwargs(Section):
    """``actor_rollout_ref.rollout.val_kwargs``: the sampling of validation (engines read the rest)."""

    PATH = "actor_rollout_ref.rollout.val_kwargs"
    #: responses per validation prompt
    n: int
    #: validation sampling temperature (0: greedy)
    temperature: float

    def problems(self) -> list[str]:
        """``n`` is a positive count."""
        return self.positive("n")


@dataclasses.dataclass(frozen=True)
class CheckpointEngineConfig(Section):
    """``actor_rollout_ref.rollout.checkpoint_engine``: how the trainer's weights reach the rollout engine
    (verl's section; rlcore has verl's ``naive`` transfer: in-process copies, Ray objects between processes)."""

    PATH = "actor_rollout_ref.rollout.checkpoint_engine"
    #: the transfer backend: only ``naive`` (verl's NCCL/NIXL/HCCL/Kimi/delta_sharded engines are rejected)
    backend: str
    #: the most MiB of gathered weights one sync holds at once (None: the whole state dict at once)
    update_weights_bucket_megabytes: float | None
    #: verl's per-backend engine arguments (must be empty)
    engine_kwargs: dict[str, Any]
    #: verl's module registering a custom backend (must be null)
    custom_backend_module: str | None

    @property
    def bucket_bytes(self) -> int | None:
        """The bucket size in bytes (verl: ``megabytes << 20``), or None for no bound."""
        megabytes = self.update_weights_bucket_megabytes
        return None if megabytes is None else max(1, int(megabytes * 2**20))

    def problems(self) -> list[str]:
        """Only the naive backend, without engine arguments or custom module; a positive bucket size."""
        found = []
        if self.backend != "naive":
            found.append(
                f"{self.key('backend')}={self.backend!r}: rlcore has only the naive transfer (in-process copies, "
                "Ray objects between processes); verl's NCCL/NIXL/HCCL/Kimi/delta_sharded checkpoint engines are "
                "not supported: set backend=naive"
            )
        if self.engine_kwargs:
            found.append(f"{self.key('engine_kwargs')}: the naive transfer takes no engine arguments, remove them")
        if self.custom_backend_module:
            found.append(f"{self.key('custom_backend_module')}: custom checkpoint-engine backends are not supported")
        megabytes = self.update_weights_bucket_megabytes
        if megabytes is not None and not (_is_number(megabytes) and megabytes > 0):
            found.append(
                f"{self.key('update_weights_bucket_megabytes')} must be a positive number of megabytes or null "
                f"(no bound), got {megabytes!r}"
            )
        return found


@dataclasses.dataclass(frozen=True)
class RolloutConfig(LogProbConfig):
    """``actor_rollout_ref.rollout``: the keys of the rollout the core reads (the rollout engine gets the
    whole section, its own keys included)."""

    PATH = "actor_rollout_ref.rollout"
    #: rollout engine component (kind ``rollout_engine``)
    name: str
    #: responses per prompt
    n: int
    #: sampling temperature (log-probs are computed at it too)
    temperature: float
    #: the dtype the engine serves on CUDA (on CPU: the trainer's)
    dtype: str
    #: prompt tokens the engine accepts
    prompt_length: int
    #: response tokens the engine generates at most
    response_length: int
    #: put the engine to sleep after generating (its memory goes back to training)
    free_cache_engine: bool
    #: verify after every weight sync that the engine serves the trainer's weights
    check_weight_sync: bool
    #: largest mean |Δ log-prob| of the sync probe (None: 1e-3 in float32, 5e-2 below)
    weight_sync_logprob_tol: float | None
    val_kwargs: ValKwargs
    #: gather (with LoRA: merge) the weights of a sync one tensor at a time (verl: layer by layer)
    layered_summon: bool
    checkpoint_engine: CheckpointEngineConfig

    def problems(self) -> list[str]:
        """The lengths and ``n`` are positive counts."""
        return self.positive("response_length") + self.positive("prompt_length")


@dataclasses.dataclass(frozen=True)
class ActorRolloutRefConfig(Section):
    """``actor_rollout_ref``: the policy side (actor, rollout, reference and their model)."""

    PATH = "actor_rollout_ref"
    #: seconds a collective may wait before the process group gives up
    nccl_timeout: float
    model: ModelConfig
    actor: ActorConfig
    rollout: RolloutConfig
    ref: RefConfig


@dataclasses.dataclass(frozen=True)
class CriticModelConfig(Section):
    """``critic.model``: the value model (the engines read the rest of the section)."""

    PATH = "critic.model"
    #: the value model's directory (defaults to the policy's)
    path: str | None


@dataclasses.dataclass(frozen=True)
class CriticConfig(PPOUpdateConfig):
    """``critic``: the value model's update and forward passes."""

    PATH = "critic"
    #: None: only when the advantage estimator needs a critic
    enable: bool | None
    #: responses per values forward pass on one rank (None: the deprecated global size, else the whole batch)
    forward_micro_batch_size_per_gpu: int | None
    #: deprecated global micro-batch of the values pass (divided over the data-parallel ranks)
    forward_micro_batch_size: int | None
    #: the token budget of a values micro-batch with ``use_dynamic_bsz``
    forward_max_token_len_per_gpu: int
    #: the value clip of the clipped value loss
    cliprange_value: float
    #: ``seq-mean-token-sum-norm``: the value loss's divisor (None: the padded response length)
    loss_scale_factor: float | None
    checkpoint: CriticCheckpointConfig
    model: CriticModelConfig


@dataclasses.dataclass(frozen=True)
class RewardModelModelConfig(Section):
    """``reward_model.model``: the discriminative reward model."""

    PATH = "reward_model.model"
    #: a token- or sequence-classification model with one label
    path: str | None
    #: the policy's tokenizer; when it differs from the reward model's, responses are re-rendered
    input_tokenizer: str | None
    #: let transformers run the model's own code
    trust_remote_code: bool


@dataclasses.dataclass(frozen=True)
class RewardModelConfig(Section):
    """``reward_model``: the reward model worker and the scoring stage (reward managers read the rest)."""

    PATH = "reward_model"
    #: a discriminative reward model scores every response
    enable: bool
    #: reward manager component (kind ``reward_manager``)
    reward_manager: str
    #: training backend that runs the reward model
    strategy: str
    #: the reward model on a Ray resource pool of its own
    enable_resource_pool: bool
    #: nodes of that pool: 0 or ``trainer.nnodes``
    nnodes: int
    #: ranks per node of that pool
    n_gpus_per_node: int
    model: RewardModelModelConfig
    #: verl's global micro-batch size, divided over the data-parallel ranks (``micro_batch_size_per_gpu`` wins)
    micro_batch_size: int | None
    #: responses per reward-model forward pass (None: the whole batch)
    micro_batch_size_per_gpu: int | None
    #: re-rendered inputs longer than this are cut from the left (None: no limit)
    max_length: int | None
    #: micro-batches of balanced token counts instead of fixed row counts
    use_dynamic_bsz: bool
    #: the token budget of a micro-batch with ``use_dynamic_bsz``
    forward_max_token_len_per_gpu: int
    #: score a batch while the log-probs and values are computed
    launch_reward_fn_async: bool
    #: scorer processes scoring a batch concurrently
    scorer_workers: int
    #: seconds per sample before a scorer is killed (0/None: no limit)
    scorer_timeout: float | None
    #: seconds for one batch's scoring (0/None: no limit)
    scorer_batch_timeout: float | None
    #: decoded samples printed per data source each step
    num_examine: int
    #: bytes of the scorer processes' output shown per batch
    scorer_output_bytes: int

    def problems(self) -> list[str]:
        """Counts are positive or non-negative, timeouts are seconds ≥ 0."""
        return (
            self.positive("scorer_workers")
            + self.non_negative("num_examine")
            + self.non_negative("scorer_output_bytes")
            + self.seconds("scorer_timeout")
            + self.seconds("scorer_batch_timeout")
        )


@dataclasses.dataclass(frozen=True)
class AlgorithmConfig(Section):
    """``algorithm``: the keys of the step the controller reads (estimators and filters get the section)."""

    PATH = "algorithm"
    #: advantage estimator component (kind ``advantage_estimator``)
    adv_estimator: str
    #: a KL penalty to the reference policy in the reward (needs the reference model)
    use_kl_in_reward: bool
    #: the KL estimator of that penalty (``kl``, ``abs``, ``mse``, ``low_var_kl``, ``k1``..``k3``)
    kl_penalty: str
    #: batch filter components applied after reward, in order
    batch_filters: list[str]
    #: generation rounds per step while filters leave too few prompts (<= 0: no limit)
    max_num_gen_batches: int
    #: PF-PPO: resample each batch by reward reliability
    use_pf_ppo: bool


@dataclasses.dataclass(frozen=True)
class DataConfig(Section):
    """``data``: batch sizes and lengths (the dataset component reads the rest)."""

    PATH = "data"
    #: dataset component (kind ``dataset``)
    dataset: str
    #: the training files (one path or a list; part of the run's fingerprint)
    train_files: str | list[str] | None
    #: prompts per step
    train_batch_size: int
    #: prompts per generation round (None: ``train_batch_size``)
    gen_batch_size: int | None
    #: prompts per validation batch (None: the whole set)
    val_batch_size: int | None
    #: prompt tokens kept
    max_prompt_length: int
    #: response tokens generated at most
    max_response_length: int
    #: how a prompt longer than ``max_prompt_length`` is handled
    truncation: Truncation

    def problems(self) -> list[str]:
        """The optional batch sizes are positive or null."""
        return self.positive("gen_batch_size", null=True) + self.positive("val_batch_size", null=True)


@dataclasses.dataclass(frozen=True)
class TrainerConfig(Section):
    """``trainer``: the run's length, placement, seed and outputs (the ones the core reads)."""

    PATH = "trainer"
    #: auto (local for one rank, else ray) | local (in-process) | ray
    executor: Literal["auto", "local", "ray"]
    #: auto | cpu | cuda
    device: str
    #: colocated (every role shares the ranks) | split (rollout on ranks of its own)
    placement: Literal["colocated", "split"]
    #: nodes of the run
    nnodes: int
    #: ranks per node
    n_gpus_per_node: int
    #: None starts a local Ray; ``auto`` or ``HOST:PORT`` attaches to a cluster
    ray_address: str | None
    #: the seed of every rank and of the prompt uids
    seed: int
    #: the project's name (checkpoint and run folders, trackers)
    project_name: str
    #: the run's name (checkpoint and run folders, trackers)
    experiment_name: str
    #: trackers: console and tracker plugins (jsonl always)
    logger: list[str]
    #: run directories are created under this folder
    runs_dir: str
    #: where checkpoints are saved
    default_local_dir: str
    #: auto | disable | resume_path (checked by :mod:`rlcore.checkpoint.manager`)
    resume_mode: str
    #: the parts of a resumed checkpoint's run fingerprint that may differ (:mod:`rlcore.checkpoint.fingerprint`)
    resume_allow_changes: list[str]
    #: reorder each batch so every data-parallel rank gets a similar token count
    balance_batch: bool
    #: steps that train only the critic before the actor updates too
    critic_warmup: int
    #: validate once and stop
    val_only: bool
    #: a folder for each step's generations (None: not written)
    rollout_data_dir: str | None
    #: a folder for each validation's generations (None: not written)
    validation_data_dir: str | None
    #: passes over the training data (unless ``total_training_steps``)
    total_epochs: int
    #: training steps (None: from the epochs)
    total_training_steps: int | None
    #: stop after this many steps in a row whose loss or gradient norm was not finite
    max_nonfinite_steps: int
    #: validation generations logged per validation
    log_val_generations: int
    #: seconds the step in progress may take after SIGINT/SIGTERM (0/None: no bound)
    stop_grace_s: float | None

    def problems(self) -> list[str]:
        """Counts are positive (steps: or null), the grace period is seconds ≥ 0."""
        return (
            self.positive("total_epochs")
            + self.positive("max_nonfinite_steps")
            + self.positive("total_training_steps", null=True)
            + self.non_negative("log_val_generations")
            + self.seconds("stop_grace_s")
        )


@dataclasses.dataclass(frozen=True)
class Sections:
    """Every typed section of a run: build it once with :meth:`from_tree` and read fields, not keys."""

    data: DataConfig
    actor_rollout_ref: ActorRolloutRefConfig
    critic: CriticConfig
    reward_model: RewardModelConfig
    algorithm: AlgorithmConfig
    trainer: TrainerConfig

    @classmethod
    def from_tree(cls, config: DictConfig) -> Sections:
        """The sections of the resolved ``config``; one :class:`ConfigError` with every problem found."""
        hints = typing.get_type_hints(cls)
        values: dict[str, Section] = {}
        problems: list[str] = []
        for field in dataclasses.fields(cls):
            try:
                values[field.name] = hints[field.name].from_tree(config)
            except ConfigError as exc:
                problems += exc.problems
        if problems:
            raise ConfigError(*problems)
        return cls(**values)  # type: ignore[arg-type]


def section_problems(config: DictConfig) -> list[str]:
    """Every problem :meth:`Sections.from_tree` finds in ``config`` (none: the sections build)."""
    try:
        Sections.from_tree(config)
    except ConfigError as exc:
        return exc.problems
    return []
