"""Split placement: an ``actor_ref`` trainer worker and a ``rollout`` worker exchanging weights by value."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from rlcore.api.batch import Batch
from rlcore.errors import RLCoreError
from rlcore.workers.actor import WeightSyncError


def test_trainer_weights_reach_a_separate_rollout_worker(
    make_worker: Callable[..., Any], batch: Batch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``export_weights`` (full CPU state dict) → ``receive_weights`` loads and checks it in the engine."""
    trainer = make_worker("actor_ref")
    rollout = make_worker("rollout")
    assert trainer.rollout_engine is None and trainer.ref is not None
    assert rollout.actor is None and rollout.ref is None
    batch.union(trainer.compute_log_prob(batch).select(["old_log_probs"]))
    batch.union(trainer.compute_ref_log_prob(batch))
    batch["advantages"] = torch.ones_like(batch["old_log_probs"])
    trainer.update_actor(batch)

    state = trainer.export_weights()
    assert all(tensor.device.type == "cpu" for tensor in state.values())
    version = rollout.rollout_engine.weight_version
    metrics = rollout.receive_weights(state)
    assert metrics["rollout/weight_checksum_diff"] <= 1e-6
    assert metrics["rollout/weight_version"] == version + 1
    engine_state = rollout.rollout_engine.module.state_dict()
    for name, tensor in trainer.full_state_dict().items():
        assert torch.equal(engine_state[name], tensor), name

    monkeypatch.setattr(rollout.rollout_engine, "update_weights", lambda named_tensors: None)
    with torch.no_grad():
        next(rollout.rollout_engine.module.parameters()).add_(1.0)
    with pytest.raises(WeightSyncError, match="weight sync failed"):
        rollout.receive_weights(state)


def test_split_roles_refuse_the_other_side(make_worker: Callable[..., Any], batch: Batch) -> None:
    """The trainer cannot generate or receive weights; the rollout worker cannot train or export."""
    trainer = make_worker("actor_ref")
    rollout = make_worker("rollout")
    with pytest.raises(RLCoreError, match="needs the rollout, but this worker's role is 'actor_ref'"):
        trainer.generate_sequences(batch)
    with pytest.raises(RLCoreError, match="needs the rollout"):
        trainer.receive_weights({})
    with pytest.raises(RLCoreError, match="needs the actor, but this worker's role is 'rollout'"):
        rollout.export_weights()
