"""The rollout-engine contract (kind ``rollout_engine``, ``actor_rollout_ref.rollout.name``) as a typed protocol.

The actor worker (:class:`rlcore.workers.actor.ActorRolloutRefWorker`) hosts one engine per rank and makes
exactly these calls. :class:`rlcore.rollout.token_engine.TokenListEngine` implements everything but the
engine-specific steps; ``rlcore.testing.contracts.rollout`` checks an engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch
    from omegaconf import DictConfig
    from transformers import PreTrainedTokenizerBase

    from rlcore.api.batch import Batch


class RolloutEngine(Protocol):
    """Constructed as ``Engine(model_path, tokenizer, config, *, device, dtype)`` with ``config`` the
    ``actor_rollout_ref.rollout`` section. Optional, detected with ``hasattr``: ``weight_checksum()`` and
    ``uncounted_names`` (an exact check of the served weights), ``state_dict()``/``load_state_dict()``
    (sampling state for exact resume) and ``close()`` (stop the engine's own processes)."""

    def __init__(
        self,
        model_path: str,
        tokenizer: PreTrainedTokenizerBase,
        config: DictConfig,
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
