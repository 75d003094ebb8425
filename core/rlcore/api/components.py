"""What the registry hands back for each component kind, as typed protocols.

One protocol per kind (:attr:`rlcore.api.kinds.KindSpec.protocol`); :attr:`rlcore.registry.Registry.load` is
typed with them, so mypy follows a component from the config through the registry to the call. A kind whose
target is a function has a ``__call__`` protocol (the function's parameter names are the contract: the core
calls with keywords or in this order); a kind whose target is a class has the protocol of its instances, the
constructor included, and the registry returns ``type[Protocol]``. The two engine kinds have theirs in
:mod:`rlcore.api.training` (``TrainingBackend``) and :mod:`rlcore.api.rollout` (``RolloutEngine``).

The small records the components hand back are defined here too (:class:`RewardResult`, :class:`ToolResult`,
:class:`InteractionTurn`, :class:`AgentSample`; :mod:`rlcore.reward` and :mod:`rlcore.agents` re-export them).
Nothing here imports torch, numpy or omegaconf at run time (their types are for the type checker only), so
the plugin loader can import this module at start-up. Like the rest of :mod:`rlcore.api` it sits on the
ground floor of the import graph: even for the type checker it imports only the contract modules, the typed config
sections (:mod:`rlcore.config.schema`, what a component receives) and the
agents' leaf data modules (``ToolCall``, ``Trajectory``), so an agent loop's context
(:class:`rlcore.agents.AgentContext`, which holds the runner's machinery) is ``Any`` here.
``tests/test_component_protocols.py`` checks every bundled component against its kind's protocol.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch
    from omegaconf import DictConfig
    from transformers import PreTrainedTokenizerBase

    from rlcore.agents.parsers import ToolCall
    from rlcore.agents.trajectory import Trajectory
    from rlcore.api.batch import Batch
    from rlcore.config.schema import ActorConfig, AlgorithmConfig, RewardModelConfig

__all__ = [
    "AdvantageEstimator",
    "AgentLoop",
    "AgentSample",
    "BatchFilter",
    "Dataset",
    "Interaction",
    "InteractionTurn",
    "PolicyLoss",
    "Preset",
    "RewardManager",
    "RewardResult",
    "RetrievedDocument",
    "Retriever",
    "RewardScorer",
    "Tool",
    "ToolParser",
    "ToolResult",
    "Tracker",
]


@dataclass
class RewardResult:
    """What a reward manager returns.

    Attributes:
        token_level_scores: ``[B, R]`` float32; each sample's score on its last valid response token.
        extra_info: per-sample lists (length ``B``) of the extra keys scorers returned in their dicts.
        metrics: scalar metrics of this call (the ``reward/scorer_*`` failure counters).
        tensors: tensors with one row per sample that the controller puts into the batch as they are (e.g.
            ``rm_scores`` and ``acc`` for an advantage estimator that reads them itself).
    """

    token_level_scores: torch.Tensor
    extra_info: dict[str, list] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class ToolResult:
    """What a tool call returns: the ``text`` the model sees, an optional step ``reward`` and ``metrics``."""

    text: str
    reward: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class RetrievedDocument:
    """One document a :class:`Retriever` found: its text, its score (higher ranks first) and its id, if any."""

    contents: str
    score: float = 0.0
    id: str | None = None


@dataclass
class InteractionTurn:
    """An interaction's reply: the user ``text``, an optional ``reward`` and whether the episode is ``done``."""

    text: str
    reward: float | None = None
    done: bool = False


@dataclass
class AgentSample:
    """One sample for a loop: its ``prompt_ids`` (the dataset's, unpadded), its chat ``messages`` (``raw_prompt``,
    None when the dataset did not keep them), ``extra_info`` and a unique ``instance_id``."""

    prompt_ids: list[int]
    messages: list[dict[str, Any]] | None
    extra_info: dict[str, Any]
    instance_id: str


class AdvantageEstimator(Protocol):
    """Kind ``advantage_estimator`` (``algorithm.adv_estimator``): a function called with keywords only."""

    def __call__(
        self,
        *,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        config: AlgorithmConfig,
        **columns: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(advantages, returns)``, both ``[B, R]``, from the token-level rewards ``[B, R]``, the response
        mask and ``index`` (a prompt id per row: rows sharing one are a group); ``config`` is the typed
        ``algorithm`` section: an :class:`~rlcore.config.schema.AlgorithmConfig` that is also an instance of
        every plugin's ``config_defaults`` section at ``algorithm`` (read ``config.gamma``, or your own
        section's field, e.g. GRPO's ``config.norm_adv_by_std_in_grpo``; never ``config.get(key, default)``).
        ``columns`` are what the estimator's
        :class:`~rlcore.api.specs.AdvantageEstimatorSpec` asks for: ``values`` (``needs_critic``),
        ``reward_baselines`` (``needs_greedy_baseline``), its ``batch_keys`` and present ``optional_batch_keys``."""
        ...


class PolicyLoss(Protocol):
    """Kind ``policy_loss`` (``actor_rollout_ref.actor.policy_loss.loss_mode``): a function."""

    def __call__(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        config: ActorConfig | None = None,
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``(loss, metrics)``: the scalar loss aggregated by ``loss_agg_mode`` and float metrics such as
        ``actor/pg_clipfrac``; ``config`` is the typed actor section: an
        :class:`~rlcore.config.schema.ActorConfig` that is also an instance of every plugin's
        ``config_defaults`` section at ``actor_rollout_ref.actor`` (read ``config.clip_ratio``,
        ``config.loss_scale_factor``, or your own section's field; None, in tests: the defaults);
        ``rollout_is_weights`` per-token importance weights ``[B, R]`` when rollout correction is on."""
        ...


class RewardScorer(Protocol):
    """Kind ``reward_scorer`` (a sample's ``data_source``): a function scoring one response."""

    def __call__(
        self, data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None
    ) -> float | dict[str, Any]:
        """The score, or a dict whose ``"score"`` is the score and whose other keys are reported as extra
        information."""
        ...


@runtime_checkable
class RewardManager(Protocol):
    """Kind ``reward_manager`` (``reward_model.reward_manager``): a class turning scores into token rewards."""

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, scorer: RewardScorer, config: RewardModelConfig | None = None
    ) -> None:
        """Keep the tokenizer (to decode responses), the scorer and the typed ``reward_model`` section: a
        :class:`~rlcore.config.schema.RewardModelConfig` that is also an instance of every plugin's
        ``config_defaults`` section at ``reward_model``, with those one level below as fields (DAPO's
        ``config.overlong_buffer``); None, in tests: the defaults."""
        ...

    def __call__(self, batch: Batch) -> RewardResult:
        """Token-level scores ``[B, R]``, each sample's scalar on its last valid response token, with
        per-sample extra information and metrics."""
        ...


@runtime_checkable
class Dataset(Protocol):
    """Kind ``dataset`` (``data.dataset``): a class of prompt rows."""

    def __init__(
        self, files: Sequence[str] | str, tokenizer: PreTrainedTokenizerBase, config: DictConfig, split: str
    ) -> None:
        """Read ``files`` (the ``data.train_files`` or ``data.val_files``) of ``split`` with the ``data`` section."""
        ...

    def __len__(self) -> int:
        """The number of prompt rows."""
        ...

    def __getitem__(self, index: int, /) -> dict[str, Any]:
        """One row: left-padded ``input_ids``/``attention_mask``/``position_ids`` of length
        ``data.max_prompt_length`` and the row's python fields (``data_source``, ``reward_model``, ...)."""
        ...


class BatchFilter(Protocol):
    """Kind ``batch_filter`` (``algorithm.batch_filters``): a function applied after reward."""

    def __call__(self, batch: Batch, config: DictConfig) -> tuple[Batch, dict[str, float]]:
        """``(kept_batch, metrics)``; ``config`` is the whole run config."""
        ...


@runtime_checkable
class Tracker(Protocol):
    """Kind ``tracker`` (``trainer.logger``): a class logging metrics. Optional, detected with ``hasattr``:
    ``log_table(name, rows, step)`` and the classmethod ``preflight(config)`` (run before training)."""

    def __init__(self, project: str, experiment: str, config: DictConfig, run_dir: str | Path) -> None:
        """Open the run (``trainer.project_name``, ``trainer.experiment_name``, the resolved config)."""
        ...

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Record one step's metrics; a failure is logged once and never stops training."""
        ...

    def finish(self) -> None:
        """Flush and close the run."""
        ...


class Preset(Protocol):
    """Kind ``preset`` (``rlcore run --preset NAME``): a mapping of dotted keys to values, or this: a
    function with no arguments returning one (the registry hands back ``Mapping[str, Any] | Preset``)."""

    def __call__(self) -> Mapping[str, Any]:
        """The dotted keys and values, applied after the defaults and before the user's files and overrides."""
        ...


@runtime_checkable
class Tool(Protocol):
    """Kind ``tool`` (``class_name`` in the tool YAML): :class:`rlcore.agents.Tool` and its subclasses."""

    def __init__(self, config: Mapping[str, Any] | None = None, tool_schema: Mapping[str, Any] | None = None) -> None:
        """Keep the YAML entry's ``config`` and ``tool_schema`` (else the class's ``default_schema``)."""
        ...

    @property
    def name(self) -> str:
        """The function name the model calls."""
        ...

    @property
    def openai_schema(self) -> dict[str, Any]:
        """The OpenAI function schema shown to the model."""
        ...

    async def create(self, instance_id: str, **kwargs: Any) -> None:
        """Set up the state of one trajectory (``kwargs`` from the sample's ``tools_kwargs``)."""
        ...

    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> ToolResult | str:
        """Run one call: text, or a :class:`ToolResult` with a step reward and metrics."""
        ...

    async def release(self, instance_id: str) -> None:
        """Drop the state of one trajectory."""
        ...


@runtime_checkable
class AgentLoop(Protocol):
    """Kind ``agent_loop`` (a sample's ``agent_name``): ``AgentLoop(context)`` then ``await loop.run(sample)``
    for each sample."""

    def __init__(self, context: Any) -> None:
        """Keep the context (an :class:`rlcore.agents.AgentContext`); built once per rollout."""
        ...

    async def run(self, sample: AgentSample) -> Trajectory:
        """The sample's trajectory; response tokens the policy did not generate must have mask 0."""
        ...


@runtime_checkable
class Interaction(Protocol):
    """Kind ``interaction`` (``class_name`` in the interaction YAML): a user simulator or environment that
    answers the assistant between turns; :class:`rlcore.agents.Interaction` and its subclasses."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        """Keep the YAML entry's ``config``."""
        ...

    async def start(self, instance_id: str, **kwargs: Any) -> None:
        """Set up one episode (``kwargs`` from the sample's ``interaction_kwargs``)."""
        ...

    async def respond(self, instance_id: str, messages: list[dict[str, Any]]) -> InteractionTurn:
        """The reply to the conversation so far, an optional reward and whether the episode is done."""
        ...

    async def finish(self, instance_id: str) -> None:
        """Drop the state of one episode."""
        ...


@runtime_checkable
class ToolParser(Protocol):
    """Kind ``tool_parser`` (``actor_rollout_ref.rollout.multi_turn.format``): a class constructed with no
    arguments that reads the tool calls of one assistant turn."""

    def parse(self, text: str) -> list[ToolCall]:
        """The calls in ``text``; a call it cannot read comes back with ``error`` set, so the model is told."""
        ...


@runtime_checkable
class Retriever(Protocol):
    """Kind ``retriever`` (``retriever`` in the ``search`` tool's config): constructed with the tool's
    ``retriever_config``; ``retrieve`` answers several queries at once. It may block (the tool runs it on a
    thread of its own, under the tool's timeout); a failure is an exception, which the tool reports to the model."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        """Keep the ``retriever_config`` mapping of the tool's config (a bad value: :class:`rlcore.api.RLCoreError`)."""
        ...

    def retrieve(self, queries: Sequence[str], topk: int) -> list[list[RetrievedDocument]]:
        """For each query, in order, at most ``topk`` documents, best first."""
        ...
