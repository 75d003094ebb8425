"""``fsdp_config.cpu_autocast``: bf16 compute on CPU with float32 master weights, and a bf16 rollout engine."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from rlcore_testkit.contracts.rollout import make_prompt_batch

from rlcore.api.batch import Batch
from rlcore.errors import RLCoreError

AUTOCAST = "actor_rollout_ref__actor__fsdp_config__cpu_autocast"


def log_probs_and_update(worker: Any, batch: Batch) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
    """The old log-probs, the metrics of one update with position-dependent advantages, and the log-probs
    after it."""
    data = batch.select()
    data["old_log_probs"] = worker.compute_log_prob(data)["old_log_probs"]
    data["advantages"] = torch.linspace(-1, 1, data["old_log_probs"].numel()).view_as(data["old_log_probs"])
    metrics = worker.update_actor(data).meta["metrics"]
    return data["old_log_probs"], metrics, worker.compute_log_prob(data)["old_log_probs"]


def test_cpu_autocast_computes_in_bf16_and_keeps_float32_weights(make_worker: Callable[..., Any], batch: Batch) -> None:
    """The forward passes run in bf16 (the log-probs move off the float32 ones by bf16 rounding, not more),
    the gradient norm stays within 5 % of float32's, the parameters and the optimizer state stay float32,
    the update still improves the advantage-weighted log-probs, and the colocated rollout engine serves the
    new weights in bf16 and samples with them."""
    reference = make_worker("actor_rollout_ref")
    fp32_before, fp32_metrics, _ = log_probs_and_update(reference, batch)
    worker = make_worker("actor_rollout_ref", **{AUTOCAST: True})
    assert worker.actor.compute_dtype is torch.bfloat16 and worker.actor.weights_dtype is torch.float32
    assert worker.ref.compute_dtype is torch.float32, "the reference keeps its own fsdp_config"
    mask = batch["response_mask"].bool()
    before, metrics, after = log_probs_and_update(worker, batch)
    difference = (before - fp32_before)[mask].abs()
    assert 0 < difference.max() < 0.1, "bf16 rounding, not another model"
    assert metrics["actor/grad_norm"] == pytest.approx(fp32_metrics["actor/grad_norm"], rel=0.05)
    assert all(p.dtype is torch.float32 for p in worker.actor.module.parameters())
    assert all(
        v.dtype is torch.float32
        for state in worker.actor.optimizer.state.values()
        for k, v in state.items()
        if k != "step"
    )
    advantages = torch.linspace(-1, 1, before.numel()).view_as(before)
    assert ((after - before) * advantages)[mask].sum() > 0, "the update follows the advantages"
    sync = worker.sync_weights()
    assert sync["rollout/weight_checksum_diff"] <= 1e-6
    assert next(worker.rollout_engine.module.parameters()).dtype is torch.bfloat16
    assert not worker.rollout_engine._shared, "a bf16 engine copies the float32 weights, it cannot share them"
    out = worker.generate_sequences(make_prompt_batch(worker.tokenizer))
    assert out["responses"].shape[1] == worker.rollout_config.response_length
    vocab = worker.rollout_engine.module.config.vocab_size  # the tiny model pads its vocabulary past the tokenizer's
    assert bool(out["response_mask"].any()) and 0 <= int(out["responses"].min()) <= int(out["responses"].max()) < vocab


def test_cpu_autocast_off_shares_the_float32_weights(make_worker: Callable[..., Any]) -> None:
    """Without the switch the single CPU rank computes in float32 and the engine serves the actor's tensors."""
    worker = make_worker("actor_rollout_ref")
    assert worker.actor.compute_dtype is torch.float32
    assert worker.rollout_engine._shared
    assert worker.actor.live_weights() is worker.actor.live_weights(), "gathered once, then reused"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({AUTOCAST: "sometimes"}, "actor_rollout_ref.actor.fsdp_config.cpu_autocast='sometimes' has the wrong type"),
        (
            {AUTOCAST: True, "actor_rollout_ref__actor__fsdp_config__dtype": "fp32"},
            "actor_rollout_ref.actor.fsdp_config.cpu_autocast=true computes in actor_rollout_ref.actor.fsdp_config.dtype",
        ),
    ],
)
def test_cpu_autocast_bad_values_name_the_key(
    make_worker: Callable[..., Any], overrides: dict[str, Any], message: str
) -> None:
    """A non-boolean switch, or autocast to float32, is refused with the key's name."""
    with pytest.raises(RLCoreError, match=re.escape(message)):
        make_worker("actor_rollout_ref", **overrides)
