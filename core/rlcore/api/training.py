"""The training-engine contract: what a ``training_backend`` plugin supplies under rlcore's generic workers.

rlcore's workers (:mod:`rlcore.workers.actor`, :mod:`rlcore.workers.critic`) own everything that is the
same for every backend: the roles, the rollout engine and its weight-sync check, batch-size validation,
the PPO mini/micro-batch loop with global loss normalisation, checkpoint manifests, RNG and generator
state. A backend supplies a :class:`TrainingBackend` whose :meth:`~TrainingBackend.create_engine` builds
one :class:`TrainingEngine` per model (the actor, the frozen reference, the critic) on this rank.

An engine runs forward passes on micro-batches, accumulates gradients of a loss the worker gives it,
steps its optimizer, exports and loads full weights under Hugging Face names, and saves and loads its
own sharded state. It never sees the algorithm: the loss arrives as a function of the engine's
:class:`ModelOutput`. ``docs/writing-an-engine.md`` walks through a new backend; the contract suite is
:class:`rlcore_testkit.contracts.backend.TrainingBackendContract`, which checks a backend and the
engines it creates.

This module imports no torch at run time, so a plugin's light ``hooks`` module may import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch
    from omegaconf import DictConfig

    from rlcore.api.batch import Batch
    from rlcore.config.sections.actor import OptimConfig
    from rlcore.config.sections.actor_rollout_ref import ModelConfig

#: what an engine holds: the trainable policy, the frozen reference policy, the trainable value model, or the
#: frozen reward model
EngineRole = Literal["actor", "ref", "critic", "reward_model"]
#: the batch key of a mixture-of-experts model's recorded routing: ``[B, P + R, L, k]`` integers laid out as
#: ``input_ids`` (``L`` sparse layers, the ``k`` experts each token was routed to; ``-1`` where nothing was
#: recorded: padding, and the last token, which the rollout never fed through the model). Written by a rollout
#: engine with ``actor_rollout_ref.rollout.enable_rollout_routing_replay`` (R3) or by the actor's
#: log-prob pass (R2); an engine whose section has ``router_replay.mode`` R2 or R3 routes each recorded token to
#: exactly those experts instead of recomputing the top-k, and recomputes it where the entry is ``-1``
ROUTED_EXPERTS = "routed_experts"
#: the batch key of token ids whose log-probs a causal LM's forward also returns: ``[B, R, k]`` integers, ``k``
#: vocabulary ids at each response position (on-policy distillation's teacher top-k). An engine that finds it
#: in a micro-batch fills :attr:`ModelOutput.gathered_log_probs` in :meth:`TrainingEngine.forward` and, with
#: gradients, in :meth:`TrainingEngine.forward_backward`; the actor's update hands them to the loss under
#: :data:`GATHERED_LOG_PROBS`
GATHER_IDS = "gather_ids"
#: the micro-batch key under which the actor's update passes :attr:`ModelOutput.gathered_log_probs` (with their
#: gradients) to the plugins' loss terms
GATHERED_LOG_PROBS = "gathered_log_probs"


@dataclass(frozen=True)
class EngineRequest:
    """What the worker asks a backend to build.

    Attributes:
        role: ``actor`` (trainable causal LM with optimizer and LR schedule), ``ref`` (frozen causal LM),
            ``critic`` (trainable value model: a backbone with a scalar head) or ``reward`` (frozen reward model:
            a pretrained token- or sequence-classification model with one label, loaded with its score head).
        config: the whole run config.
        section: the config section of the role: ``actor_rollout_ref.actor``, ``actor_rollout_ref.ref``,
            ``critic`` or ``reward_model``; errors name keys under it.
        model_section: where the model is described: ``actor_rollout_ref.model``, ``critic.model`` or
            ``reward_model.model``.
        device: this rank's compute device (the worker resolved ``trainer.device``).
        rank: this process's global rank.
        world_size: the number of processes of the worker group (``torch.distributed`` is initialised).
        model: the model section at ``model_section`` as typed fields, the one place an engine reads them: a
            section that declares fewer of them (``critic.model``, ``reward_model.model``) holds their defaults
            for the rest (no LoRA, no kernel switches).
        optim: the optimizer section ``{section}.optim`` of a trained role (``actor``, ``critic``) as typed
            fields; None for a frozen one.
        share_with: for ``ref`` only, the actor engine of the same worker, which a backend may reuse
            (LoRA: the reference is the actor with its adapters disabled); None otherwise.
    """

    role: EngineRole
    config: DictConfig
    section: str
    model_section: str
    device: torch.device
    rank: int
    world_size: int
    model: ModelConfig
    optim: OptimConfig | None
    share_with: TrainingEngine | None = None


@dataclass(frozen=True)
class ParallelLayout:
    """Where a rank sits in its engine's parallel layout, as the worker group dispatches batches.

    Attributes:
        dp_rank: the data-parallel rank: which chunk of a batch this rank receives.
        dp_size: how many chunks a batch is cut into (world size ÷ model-parallel size).
        is_output_rank: whether this rank's results are collected (one rank per data-parallel chunk, e.g.
            tensor-parallel rank 0 on the last pipeline stage); the other ranks' results are dropped.
    """

    dp_rank: int
    dp_size: int
    is_output_rank: bool = True


@dataclass
class ModelOutput:
    """What one forward pass of one micro-batch produced, each ``[B, R]`` float32 over the response tokens
    (None where not asked for, or on ranks that hold no output, e.g. early pipeline stages).

    Attributes:
        log_probs: ``log π(response_t | prefix)`` at the request's temperature (actor and reference).
        entropy: the entropy of that tempered distribution at each response position.
        values: the value model's estimate at the state before each response token (critic).
        scores: the reward model's logit at each response token's own position (reward); the worker reads
            the one at the last valid token.
        sum_pi_squared: ``Σ_v π(v | prefix)²`` of that tempered distribution over the whole vocabulary at each
            response position (actor, asked for by ``with_sum_pi_squared``; verl's ``calculate_sum_pi_squared``,
            read by the optimal token baseline).
        gathered_log_probs: ``[B, R, k]`` the log-probs of the micro-batch's :data:`GATHER_IDS` under that
            tempered distribution (``log_softmax(logits / temperature)`` read at each id), filled by a causal LM
            when the micro-batch has them.
        top_k_ids: ``[B, R, k]`` int64, the ``k`` most likely ids of that tempered distribution at each response
            position, most likely first (asked for by ``top_k=k`` in :meth:`TrainingEngine.forward`).
        top_k_log_probs: ``[B, R, k]`` their log-probs (not renormalised over the ``k``).
        routed_experts: a mixture-of-experts model's routing in this forward, ``[B, P + R, L, k]`` integers laid
            out as ``input_ids`` (``L`` sparse layers, the ``k`` experts each token used; ``-1`` outside the
            attention mask). Filled by an engine whose section records routing
            (``router_replay.mode=R2`` in :meth:`TrainingEngine.forward`); the worker stores it in the batch as
            ``routed_experts`` for the update to replay (see :data:`ROUTED_EXPERTS`).
        stats: scalar statistics the engine measured on this micro-batch, by bare name (a mixture-of-experts
            model: ``moe_aux_loss``, ``moe_load_max_over_mean``, ``moe_dropped_fraction``,
            ``router_replay_agreement``); the worker averages each over the micro-batches of a call and logs it
            under the role's prefix (``actor/moe_aux_loss``). Engines of dense models leave it empty.
    """

    log_probs: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    values: torch.Tensor | None = None
    scores: torch.Tensor | None = None
    sum_pi_squared: torch.Tensor | None = None
    gathered_log_probs: torch.Tensor | None = None
    top_k_ids: torch.Tensor | None = None
    top_k_log_probs: torch.Tensor | None = None
    routed_experts: torch.Tensor | None = None
    stats: dict[str, float] = field(default_factory=dict)

    def require(self, name: str) -> torch.Tensor:
        """The output ``name`` (``log_probs``, ``entropy``, ``values``, ``scores``, ``sum_pi_squared``,
        ``gathered_log_probs``, ``top_k_ids`` or ``top_k_log_probs``); an engine
        that did not fill what the worker asked for breaks the contract, which the error says."""
        value = getattr(self, name)
        if value is None:
            from rlcore.errors import RLCoreError

            raise RLCoreError(f"the training engine returned no {name} although the worker asked for them")
        return value


#: ``loss_fn(index, micro_batch, output) -> loss``: the loss of micro-batch ``index`` of a
#: :meth:`TrainingEngine.forward_backward` call, already scaled by the worker (see the method)
MicroBatchLoss = Callable[[int, "Batch", ModelOutput], "torch.Tensor"]


@runtime_checkable
class TrainingEngine(Protocol):
    """One model on this rank, built by :meth:`TrainingBackend.create_engine`.

    Every method that computes is collective over the engine's ranks: all ranks call it with their own
    micro-batches (the same number of them). Tensors in a :class:`~rlcore.api.batch.Batch` arrive on the
    CPU; the engine moves what it needs to its device and returns outputs on the CPU.
    """

    #: the compute device of this rank
    device: torch.device
    #: the data-parallel position of this rank (see :class:`ParallelLayout`)
    layout: ParallelLayout
    #: the dtype of the weights :meth:`full_weights` returns
    weights_dtype: torch.dtype
    #: the dtype the model's matrix products run in (``weights_dtype`` unless the engine computes in lower
    #: precision); a rollout engine on this rank's CPU serves the weights in it
    compute_dtype: torch.dtype

    def forward(
        self,
        micro_batches: Sequence[Batch],
        *,
        temperature: float,
        with_entropy: bool,
        with_sum_pi_squared: bool = False,
        top_k: int = 0,
    ) -> list[ModelOutput]:
        """Outputs of every micro-batch without gradients, in eval mode, in order, on every rank (an engine
        whose outputs appear on some ranks only, such as the last pipeline stage, broadcasts them).

        A micro-batch holds ``input_ids``, ``attention_mask``, ``position_ids`` ``[B, P + R]`` (left-padded
        prompts followed by right-padded responses) and ``responses`` ``[B, R]``. Causal LMs fill
        ``log_probs`` (logits divided by ``temperature`` before the softmax) and, with ``with_entropy``,
        ``entropy``; value models fill ``values``; reward models fill ``scores``. Positions outside the attention mask may hold anything.

        ``with_sum_pi_squared`` (actor only) also fills ``sum_pi_squared``. A backend that computes it says so
        in its registration (``TrainingBackendSpec(sum_pi_squared=True)``); for any other the run is refused before it starts
        when ``actor_rollout_ref.actor.calculate_sum_pi_squared`` is set, so it is never asked.

        ``top_k`` > 0 (a causal LM) also fills ``top_k_ids`` and ``top_k_log_probs``; a micro-batch holding
        :data:`GATHER_IDS` also gets ``gathered_log_probs``. Like ``with_sum_pi_squared``, ``top_k`` is passed
        only when it is asked for.
        """
        ...

    def forward_backward(
        self, micro_batches: Sequence[Batch], loss_fn: MicroBatchLoss, *, temperature: float, with_entropy: bool
    ) -> None:
        """Accumulate gradients over ``micro_batches`` in train mode: forward each (as :meth:`forward` does,
        with gradients, ``gathered_log_probs`` included where the micro-batch has :data:`GATHER_IDS`), call
        ``loss_fn(index, micro_batch, output)`` with the micro-batch's tensors on the
        engine's device, and back-propagate the loss it returns.

        The worker has already scaled each loss so that the summed gradient, **averaged over the
        data-parallel ranks** (what FSDP, DDP and Megatron's data-parallel reduction all do), is the
        gradient of the whole mini-batch; the engine must not rescale. An engine that schedules the
        micro-batches itself (pipeline parallelism) may call ``loss_fn`` in any order, once per micro-batch,
        and only on the ranks that hold outputs.
        """
        ...

    def optimizer_step(self, grad_clip: float | None) -> float:
        """Clip the accumulated gradients to ``grad_clip`` (None or ≤ 0: no clipping), step the optimizer when
        their global norm is finite, zero them, and return that norm (``nan``/``inf`` when the step was
        skipped)."""
        ...

    def lr_scheduler_step(self) -> float:
        """Advance the learning-rate schedule once; returns the rate the update just made used."""
        ...

    def all_reduce_sum(self, value: float) -> float:
        """The sum of ``value`` over the data-parallel ranks (``value`` itself for one)."""
        ...

    def resident(self) -> AbstractContextManager[object]:
        """A context in which the model (and optimizer state) are on the compute device; engines that
        offload between calls (``param_offload``, ``optimizer_offload``) move them back out on exit."""
        ...

    def full_weights(self, *, only_rank0: bool = False) -> dict[str, torch.Tensor]:
        """The full, unsharded weights under Hugging Face names (with LoRA: merged). Collective.

        With ``only_rank0`` the tensors are on the CPU, complete on global rank 0 and the dict is empty on
        the other ranks (for sending to another process); otherwise every rank gets all of them on its
        device.
        """
        ...

    def load_full_weights(self, state: Mapping[str, torch.Tensor]) -> None:
        """Replace the model's weights by ``state`` (Hugging Face names, full tensors, on every rank)."""
        ...

    def save(self, directory: Path, contents: set[str]) -> None:
        """Write the sharded ``model`` and/or ``optimizer`` state (:data:`rlcore.config.sections.update.ENGINE_CONTENTS`) under ``directory``.

        Collective. The worker writes the manifest, the RNG and LR-schedule state next to it. An optimizer
        that has taken no step yet is not saved: :meth:`has_optimizer_state` says so, and :meth:`load`
        is then not asked for it.
        """
        ...

    def load(self, directory: Path, contents: set[str]) -> None:
        """Load what :meth:`save` wrote (possibly from another data-parallel size). Collective."""
        ...

    def has_optimizer_state(self) -> bool:
        """Whether the optimizer has state to save (it has taken a step)."""
        ...

    def reset_optimizer_state(self) -> None:
        """Drop the optimizer's state (a checkpoint saved before the first step is being loaded)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """This rank's small engine state for the checkpoint's per-rank file (at least the LR schedule)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        ...

    def save_hf(self, directory: Path, *, with_weights: bool) -> None:
        """Write the Hugging Face model config into ``directory`` and, ``with_weights``, the full weights, so
        that ``AutoModelForCausalLM.from_pretrained`` loads it; rank 0 writes. Collective."""
        ...

    def close(self) -> None:
        """Release what the engine holds beyond Python objects (model-parallel groups); idempotent."""
        ...


@runtime_checkable
class SupportsWeightStream(Protocol):
    """An optional ability of a :class:`TrainingEngine`: gathering its full weights one tensor at a time, so
    that a bucketed weight sync holds one bucket of gathered weights at a time. The actor worker checks
    ``isinstance(engine, SupportsWeightStream)``; an engine without it is read with
    :meth:`TrainingEngine.full_weights`."""

    def iter_full_weights(self, *, only_rank0: bool = False) -> Iterator[tuple[str, torch.Tensor]]:
        """The weights of :meth:`TrainingEngine.full_weights` as ``(name, tensor)`` pairs, tied aliases left
        out. Collective: every rank consumes the whole iterator; with ``only_rank0`` the tensors are on the CPU
        and complete on global rank 0 only."""
        ...


@runtime_checkable
class SupportsLiveWeights(Protocol):
    """An optional ability of a :class:`TrainingEngine`: lending the actor's own parameter tensors, which
    training updates in place, to a rollout engine in the same process that serves them without a copy
    (:class:`rlcore.api.rollout.SupportsSharedWeights`)."""

    def live_weights(self) -> dict[str, torch.Tensor] | None:
        """The parameter tensors by Hugging Face name (tied aliases included), or None where they cannot be
        lent (sharded, offloaded, LoRA)."""
        ...


class TrainingBackend(Protocol):
    """The target a ``training_backend`` plugin registers (``actor_rollout_ref.actor.strategy``,
    ``critic.strategy``)."""

    def check_config(self, config: DictConfig, role: EngineRole, section: str, model_section: str) -> None:
        """Raise :class:`rlcore.errors.RLCoreError` naming the key for any setting of ``section`` (and
        ``model_section``) that this backend cannot run; called before any process group or model exists."""
        ...

    def create_engine(self, request: EngineRequest) -> TrainingEngine:
        """Build the model that ``request`` describes on this rank (called once per role by each rank)."""
        ...
