"""The critic worker: value shapes and learning (checkpoints: test_checkpoint.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rlcore.api.batch import Batch
from rlcore.modelkit.hf_models import ValueModel

CRITIC_METRICS = ("critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm", "critic/lr")


def test_values_shape_and_initial_zero(make_worker: Callable[..., Any], batch: Batch) -> None:
    """``values`` is ``[B, R]``; the zero-initialised head gives 0 everywhere before training."""
    worker = make_worker("critic")
    assert isinstance(worker.critic.module, ValueModel)
    values = worker.compute_values(batch)["values"]
    assert values.shape == batch["responses"].shape
    assert values.dtype == torch.float32
    assert torch.count_nonzero(values) == 0


def test_update_reduces_the_value_loss(make_worker: Callable[..., Any], batch: Batch) -> None:
    """Repeated updates towards fixed returns lower ``critic/vf_loss``; values stay 0 outside the mask."""
    worker = make_worker("critic", critic__optim__lr=1e-3, critic__cliprange_value=10.0)
    batch["returns"] = torch.full(batch["responses"].shape, 0.5) * batch["response_mask"]
    losses = []
    for _ in range(4):
        batch["values"] = worker.compute_values(batch)["values"]
        metrics = worker.update_critic(batch).meta["metrics"]
        assert set(CRITIC_METRICS) <= metrics.keys()
        assert all(isinstance(metrics[key], float) for key in CRITIC_METRICS)
        losses.append(metrics["critic/vf_loss"])
    assert all(later < earlier for earlier, later in zip(losses, losses[1:])), losses
    values = worker.compute_values(batch)["values"]
    assert torch.count_nonzero(values * (1 - batch["response_mask"])) == 0
    assert (values * batch["response_mask"]).sum() > 0
