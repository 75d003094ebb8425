"""The rollout-engine contract (kind ``rollout_engine``, ``actor_rollout_ref.rollout.name``) as a typed protocol.

The actor worker (:class:`rlcore.workers.actor.ActorRolloutRefWorker`) hosts one engine per rank and makes
exactly these calls. :class:`rlcore.rollout.token_engine.TokenListEngine` implements everything but the
engine-specific steps; ``rlcore_testkit.contracts.rollout`` checks an engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

    from rlcore.api.batch import Batch
    from rlcore.config.sections.rollout import RolloutConfig


class RolloutEngine(Protocol):
    """Constructed as ``Engine(model_path, tokenizer, config, *, device, dtype)`` with ``config`` the typed
    ``actor_rollout_ref.rollout`` section: an instance of the engine's :attr:`config_class`, built once by the
    actor worker from the run's config (an LLM judge builds it from the defaults and its own values with
    ``default_section(config_class, ...)``). Optional abilities, each a protocol below that the actor worker
    checks with ``isinstance``: :class:`SupportsWeightChecksum` (an exact check of the served weights),
    :class:`SupportsSharedWeights` (serving a CPU actor's own tensors), :class:`SupportsSamplingState`
    (sampling state for exact resume), :class:`SupportsPartialRollout` (resumable generation across weight
    updates) and :class:`SupportsClose` (stop the engine's own processes)."""

    #: the typed section the engine reads: :class:`~rlcore.config.sections.rollout.RolloutConfig`, or a subclass
    #: that adds the engine plugin's own keys of ``actor_rollout_ref.rollout`` (``vllm``, ``sglang``, ...)
    config_class: ClassVar[type[RolloutConfig]]

    def __init__(
        self,
        model_path: str,
        tokenizer: PreTrainedTokenizerBase,
        config: RolloutConfig,
        *,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        """Load the model (or a placeholder the first weight sync fills) for ``device`` in ``dtype``."""
        ...

    @property
    def weight_version(self) -> int:
        """How many times :meth:`update_weights` has replaced the weights."""
        ...

    def generate(self, batch: Batch, validate: bool = False) -> Batch:
        """Responses for left-padded prompts (``input_ids``, ``attention_mask``, ``position_ids``): the batch
        gains ``prompts``, ``responses``, ``response_mask`` and full-sequence tensors (+ ``rollout_log_probs``
        with ``calculate_log_probs``; + ``routed_experts``, see :data:`rlcore.api.training.ROUTED_EXPERTS`, with
        ``enable_rollout_routing_replay`` on a mixture-of-experts model). ``validate`` selects ``val_kwargs``;
        ``meta["do_sample"]`` false is greedy."""
        ...

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Serve these full weights (Hugging Face names) from now on."""
        ...

    def prompt_log_probs(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Teacher-forced log-probs of ``token_ids[1:]`` (the weight-sync parity probe)."""
        ...

    def sleep(self) -> None:
        """Release device memory while training runs (a no-op where there is nothing to free)."""
        ...

    def wake(self) -> None:
        """Take the memory back before generating or syncing."""
        ...


@runtime_checkable
class SupportsWeightChecksum(Protocol):
    """A rollout engine that can prove which weights it serves: after every weight sync (with
    ``rollout.check_weight_sync``) the worker compares this checksum with the trainer's, instead of
    comparing the log-probs of a probe sequence."""

    @property
    def uncounted_names(self) -> frozenset[str]:
        """The weight names the checksum leaves out (weights the engine does not hold, e.g. a tied head)."""
        ...

    def weight_checksum(self) -> float:
        """:func:`rlcore.rollout.weights.state_checksum` of the served weights, in the served dtype."""
        ...


@runtime_checkable
class SupportsSharedWeights(Protocol):
    """A rollout engine that can serve a trainer's own tensors without a copy (one CPU rank, the actor's
    :class:`rlcore.api.training.SupportsLiveWeights`)."""

    def share_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> bool:
        """Serve these tensors themselves from now on; False when the engine cannot (then nothing changed)."""
        ...


@runtime_checkable
class SupportsSamplingState(Protocol):
    """A rollout engine with a resumable sampling state (the generate calls that drew seeds, the weight
    version), saved in the actor's checkpoint so that a resumed run samples as an uninterrupted one."""

    def state_dict(self) -> dict[str, Any]:
        """The engine's sampling state."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; called after the trainer's weights are synced."""
        ...


@runtime_checkable
class SupportsPartialRollout(Protocol):
    """A rollout engine that generates in resumable chunks (partial rollout): a weight update between two
    calls is served to the rows still decoding, which keep their tokens and log-probs.

    A trajectory's tokens are tagged with the :attr:`RolloutEngine.weight_version` that sampled them
    (``rollout_versions``); the state of the rows is in the batch itself (:mod:`rlcore.rollout.partial`)."""

    def generate_partial(self, batch: Batch, max_new_tokens: int, validate: bool = False) -> Batch:
        """Decode at most ``max_new_tokens`` more tokens for every row of ``batch`` not yet finished, with
        the weights served now.

        ``batch`` holds fresh left-padded prompts (as :meth:`RolloutEngine.generate`) or the previous
        call's output for those rows (``prompts``, ``responses``, ``response_mask``, ``rollout_log_probs``,
        ``rollout_versions``, ``finished`` [B] bool, ``row_seeds`` [B] int64). Rows already ``finished`` are
        untouched; no row exceeds ``rollout.response_length`` tokens in total; a row finishes at its EOS
        token or at that length. The result has ``generate``'s layout plus ``rollout_versions`` (int64
        ``[B, R]``: each token's weight version, 0 on padding), ``finished`` and ``row_seeds``; the
        log-probs are the serving policy's at the sampling temperature, as ``generate`` records them.
        ``validate`` and ``meta["do_sample"]`` select the sampling as for ``generate``."""
        ...


@runtime_checkable
class SupportsClose(Protocol):
    """A rollout engine that runs processes of its own, stopped when the worker shuts down."""

    def close(self) -> None:
        """Stop the engine's processes and release what it holds."""
        ...
