"""The per-token outputs of a causal LM's forward that read the vocabulary at several ids per position: the
log-probs at a micro-batch's :data:`~rlcore.api.training.GATHER_IDS` and the ``top_k`` most likely ids with
their log-probs (on-policy distillation's teacher top-k and the student's log-probs there).

Shared by every engine that has the tempered logits of the response positions (the Hugging Face forward of
FSDP and DeepSpeed, Megatron's last stage), so that they fill :class:`~rlcore.api.training.ModelOutput` the
same way.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlcore.algos import logprobs_at_ids, top_k_logprobs
from rlcore.api.training import GATHER_IDS, ModelOutput
from rlcore.errors import RLCoreError


def check_top_k(top_k: int, vocab_size: int) -> None:
    """Raise when ``top_k`` is negative or larger than the vocabulary."""
    if top_k < 0 or top_k > vocab_size:
        raise RLCoreError(f"top_k={top_k} must be between 0 and the model's vocabulary size ({vocab_size})")


def add_id_outputs(
    output: ModelOutput,
    logits: torch.Tensor,
    gather_ids: torch.Tensor | None,
    top_k: int,
    restore: Callable[[torch.Tensor], torch.Tensor] = lambda t: t,
) -> ModelOutput:
    """``output`` with ``gathered_log_probs`` (when ``gather_ids`` ``[..., k]`` is given, laid out as
    ``logits`` ``[..., V]``) and, ``top_k`` > 0, ``top_k_ids`` and ``top_k_log_probs``, each brought to
    ``[B, R, k]`` by ``restore``. ``logits`` are already tempered."""
    if gather_ids is not None:
        vocab = logits.shape[-1]
        if gather_ids.numel() and (int(gather_ids.min()) < 0 or int(gather_ids.max()) >= vocab):
            raise RLCoreError(
                f"batch key {GATHER_IDS!r} holds ids outside the model's vocabulary [0, {vocab}): "
                f"{int(gather_ids.min())} … {int(gather_ids.max())}"
            )
        output.gathered_log_probs = restore(logprobs_at_ids(logits, gather_ids))
    if top_k:
        check_top_k(top_k, logits.shape[-1])
        ids, log_probs = top_k_logprobs(logits, top_k)
        output.top_k_ids, output.top_k_log_probs = restore(ids), restore(log_probs)
    return output
