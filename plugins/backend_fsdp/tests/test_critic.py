"""The critic worker: value shapes and learning (checkpoints: test_checkpoint.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
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


def test_loss_scale_factor_divides_the_value_loss(make_worker: Callable[..., Any], batch: Batch) -> None:
    """Under ``seq-mean-token-sum-norm`` the value loss is divided by ``critic.loss_scale_factor`` (verl 0.10's
    key; by default the actor's), else by the padded response length."""
    batch["returns"] = torch.full(batch["responses"].shape, 0.5) * batch["response_mask"]
    losses = {}
    for factor in (None, 2.0):
        worker = make_worker(
            "critic", critic__loss_agg_mode="seq-mean-token-sum-norm", critic__loss_scale_factor=factor
        )
        batch["values"] = worker.compute_values(batch)["values"]
        losses[factor] = worker.update_critic(batch).meta["metrics"]["critic/vf_loss"]
    response_length = batch["responses"].shape[-1]
    assert losses[2.0] == pytest.approx(losses[None] * response_length / 2.0, rel=1e-5)


def test_loss_scale_factor_follows_the_actors(make_config: Callable[..., Any]) -> None:
    """Unset, the critic's factor is the actor's, as in verl."""
    config = make_config(actor_rollout_ref__actor__loss_scale_factor=64.0)
    assert config.critic.loss_scale_factor == 64.0
