"""Mixture-of-experts actors on the FSDP engine: the MoE metrics of the update, routing replay R2 (the log-prob
pass records, the update replays) and R3 (the batch carries the routing), the FSDP units, and two GRPO steps
on two gloo ranks. Resume and the Hugging Face export are covered by ``test_checkpoint.py`` (its ``qwen3_moe``
cases)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.runs import make_tiny_task, tiny_run
from rlcore_testkit.tiny import make_tiny_moe_model_dir

from rlcore.api.batch import Batch
from rlcore.errors import RLCoreError

QWEN3_MOE = pytest.mark.parametrize("policy_model_dir", ["qwen3_moe"], indirect=True)
R2 = {"actor_rollout_ref__actor__router_replay__mode": "R2"}


def with_advantages(batch: Batch, old: Batch) -> Batch:
    """A copy of ``batch`` with the log-prob pass's outputs ``old`` and varied advantages."""
    data = batch.select(list(batch.keys()))
    data.union(old)
    data["advantages"] = torch.linspace(-1.0, 1.0, data["old_log_probs"].numel()).reshape(data["old_log_probs"].shape)
    return data


@QWEN3_MOE
def test_update_logs_the_moe_metrics(make_worker: Callable[..., Any], batch: Batch) -> None:
    """Without replay the update reports the load-balancing loss and the expert load, and no agreement."""
    worker = make_worker("actor")
    old = worker.compute_log_prob(batch)
    assert "routed_experts" not in old
    metrics = worker.update_actor(with_advantages(batch, old)).meta["metrics"]
    assert math.isfinite(metrics["actor/moe_aux_loss"]) and metrics["actor/moe_aux_loss"] > 0
    assert 1.0 <= metrics["actor/moe_load_max_over_mean"] <= 4.0
    assert "actor/router_replay_agreement" not in metrics


@QWEN3_MOE
def test_r2_records_in_the_log_prob_pass_and_replays_in_the_update(
    make_worker: Callable[..., Any], batch: Batch
) -> None:
    """R2: ``compute_log_prob`` returns ``routed_experts`` laid out as ``input_ids`` (-1 on padding); the
    update, one optimizer step on unchanged weights, replays them with agreement 1.0 and its first forward
    reproduces the recorded log-probs (the ratio is 1: ``actor/ppo_kl`` 0)."""
    worker = make_worker("actor", **R2)
    old = worker.compute_log_prob(batch)
    routed = old["routed_experts"]
    assert routed.shape == (*batch["input_ids"].shape, 2, 2)
    assert (routed[batch["attention_mask"] == 0] == -1).all()
    assert (routed[batch["attention_mask"] == 1] >= 0).all()
    metrics = worker.update_actor(with_advantages(batch, old)).meta["metrics"]
    assert metrics["actor/router_replay_agreement"] == 1.0
    assert metrics["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-7)


@QWEN3_MOE
def test_r3_replays_the_routing_the_batch_carries(make_worker: Callable[..., Any], batch: Batch) -> None:
    """R3: with a routing recorded on the same weights in the batch, the log-prob pass and the update replay
    it (agreement 1.0, the same old log-probs as the recording pass); without it both refuse, naming the key."""
    recorder = make_worker("actor", **R2)
    recorded = recorder.compute_log_prob(batch)
    worker = make_worker("actor", actor_rollout_ref__actor__router_replay__mode="R3")
    with pytest.raises(RLCoreError, match="mode=R3 replays the rollout's routing, but the batch has no routed_experts"):
        worker.compute_log_prob(batch)
    carried = batch.select(list(batch.keys()))
    carried["routed_experts"] = recorded["routed_experts"]
    old = worker.compute_log_prob(carried)
    assert "routed_experts" not in old
    torch.testing.assert_close(old["old_log_probs"], recorded["old_log_probs"], rtol=0, atol=0)
    metrics = worker.update_actor(with_advantages(carried, old)).meta["metrics"]
    assert metrics["actor/router_replay_agreement"] == 1.0


def test_replay_on_a_dense_model_is_refused_by_the_engine(make_worker: Callable[..., Any]) -> None:
    with pytest.raises(RLCoreError, match=r"router_replay.mode=R2 needs a mixture-of-experts model, .* dense 'qwen2'"):
        make_worker("actor", **R2)


def test_fsdp_wraps_one_unit_per_decoder_layer(tmp_path: Path) -> None:
    """The FSDP units of a MoE model are its decoder layers (experts, router and shared expert inside each)."""
    from rlcore_plugin_fsdp.fsdp import decoder_layers
    from transformers import AutoModelForCausalLM

    for family in ("qwen3_moe", "qwen2_moe"):
        model = AutoModelForCausalLM.from_pretrained(make_tiny_moe_model_dir(tmp_path / family, family=family))
        assert [type(layer).__name__ for layer in decoder_layers(model)] == [type(model.model.layers[0]).__name__] * 2


def test_two_grpo_steps_on_two_gloo_ranks_with_r2(warm_ray: None, tmp_path: Path) -> None:
    """Two FSDP2 ranks (Ray workers, gloo) train a tiny Qwen3-MoE for two GRPO steps with R2 replay; the MoE
    metrics are logged and finite."""
    pytest.importorskip("ray")
    model_dir = make_tiny_moe_model_dir(tmp_path / "model")
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(
        tmp_path,
        model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.router_replay.mode=R2",
        "trainer.executor=ray",
        "trainer.n_gpus_per_node=2",
    )
    assert last["training/global_step"] == 2
    for key in ("actor/moe_aux_loss", "actor/moe_load_max_over_mean", "actor/router_replay_agreement"):
        assert math.isfinite(last[key]), key
    assert 0.0 < last["actor/router_replay_agreement"] <= 1.0
