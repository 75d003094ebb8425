"""A step extension's parts for ``test_hook_step_extensions``: a worker that measures response lengths and an
actor loss term that reads them (imported by ``module:attr`` in the processes that build them)."""

from __future__ import annotations

from typing import Any

import torch

from rlcore.api.batch import Batch
from rlcore.workers.base import WorkerBase


class ResponseLengthWorker(WorkerBase):
    """Role ``lengths``: ``response_lengths(batch)`` → the ``response_lengths`` ``[B]`` column and a metric."""

    ROLES = ("lengths",)

    def configure(self) -> None:
        """Nothing to validate."""
        self.ready = False

    def init_model(self) -> None:
        """No model: mark the worker ready."""
        self.ready = True

    def response_lengths(self, batch: Batch) -> Batch:
        """Each response's length, and their mean as ``lengths/mean``."""
        assert self.ready, "init_model() ran before the first step"
        lengths = batch["response_mask"].sum(-1).to(torch.float32)
        return Batch.from_dict({"response_lengths": lengths}, meta={"metrics": {"lengths/mean": float(lengths.mean())}})


def make_zero_term(config: Any) -> Any:
    """A term that reads ``response_lengths`` and replaces the actor loss by zero (so nothing moves)."""

    def term(log_prob: torch.Tensor, micro: Any, loss: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """``0 · loss``, and the micro-batch's mean length as ``actor/lengths_seen``."""
        return loss * 0.0, {"actor/lengths_seen": float(micro["response_lengths"].mean())}

    return term
