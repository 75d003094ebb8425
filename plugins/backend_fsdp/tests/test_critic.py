"""The critic worker: value shapes, learning, and checkpoints."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rlcore.protocol import Batch
from rlcore_plugin_fsdp.critic import ValueModel

CRITIC_METRICS = ("critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm", "critic/lr")


def critic_params(worker: Any) -> dict[str, torch.Tensor]:
    """Copies of the critic's full parameters."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(worker.critic_module, options=StateDictOptions(full_state_dict=True))
    return {name: tensor.detach().clone() for name, tensor in state.items()}


def test_values_shape_and_initial_zero(make_worker: Callable[..., Any], batch: Batch) -> None:
    """``values`` is ``[B, R]``; the zero-initialised head gives 0 everywhere before training."""
    worker = make_worker("critic")
    assert isinstance(worker.critic_module, ValueModel)
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


def test_checkpoint_round_trip(make_worker: Callable[..., Any], batch: Batch, tmp_path: Path) -> None:
    """The critic's parameters and LR schedule survive save → update → load."""
    worker = make_worker("critic", critic__optim__lr=1e-2)
    batch["values"] = worker.compute_values(batch)["values"]
    batch["returns"] = torch.ones(batch["responses"].shape)
    worker.update_critic(batch)
    worker.save_checkpoint(tmp_path)
    assert (tmp_path / "critic" / "model.pt").is_file()
    saved = critic_params(worker)
    worker.update_critic(batch)
    worker.load_checkpoint(tmp_path)
    for name, tensor in critic_params(worker).items():
        assert torch.equal(tensor, saved[name]), name
    assert worker.lr_scheduler.last_epoch == 1
