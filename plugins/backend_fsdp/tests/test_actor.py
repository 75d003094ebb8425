"""The actor/rollout/ref worker: log-prob numerics, the PPO update loop and weight sync (checkpoints:
test_checkpoint.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from rlcore.api.batch import Batch
from rlcore.errors import RLCoreError
from rlcore.workers.actor import WeightSyncError


def plain_log_probs(model_dir: Path, batch: Batch, temperature: float = 1.0) -> torch.Tensor:
    """Teacher-forced response log-probs from an unwrapped Hugging Face model (full logits, no tricks)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompt_len = batch["prompts"].shape[1]
    length = batch["responses"].shape[1]
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits
    logits = logits[:, prompt_len - 1 : prompt_len + length - 1].float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)


def full_state(worker: Any) -> dict[str, torch.Tensor]:
    """A detached copy of the actor's full state dict."""
    return {name: tensor.detach().clone() for name, tensor in worker.full_state_dict().items()}


def optimizer_state(worker: Any) -> dict[str, torch.Tensor]:
    """The actor's full optimizer state as ``{"<param>.<slot>": tensor}`` copies."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True)
    state = get_optimizer_state_dict(worker.actor.module, worker.actor.optimizer, options=options)
    return {f"{name}.{slot}": value.clone() for name, slots in state["state"].items() for slot, value in slots.items()}


def with_old_log_probs(worker: Any, batch: Batch, advantage: float = 1.0) -> Batch:
    """``batch`` plus the worker's ``old_log_probs`` and constant ``advantages``."""
    batch.union(worker.compute_log_prob(batch).select(["old_log_probs"]))
    batch["advantages"] = torch.full_like(batch["old_log_probs"], advantage)
    return batch


def test_log_probs_match_plain_hf_model(make_worker: Callable[..., Any], batch: Batch, tiny_model_dir: Path) -> None:
    """FSDP2 log-probs (micro-batched, last R+1 logits only) equal an unwrapped model's to 1e-5."""
    worker = make_worker("actor", actor_rollout_ref__rollout__log_prob_micro_batch_size_per_gpu=3)
    out = worker.compute_log_prob(batch)["old_log_probs"]
    torch.testing.assert_close(out, plain_log_probs(tiny_model_dir, batch), atol=1e-5, rtol=0)


def test_log_probs_use_the_sampling_temperature(
    make_worker: Callable[..., Any], batch: Batch, tiny_model_dir: Path
) -> None:
    """Logits are divided by ``meta["temperature"]`` (else ``rollout.temperature``) before the softmax."""
    worker = make_worker("actor", actor_rollout_ref__rollout__temperature=0.7)
    from_config = worker.compute_log_prob(batch)["old_log_probs"]
    expected = plain_log_probs(tiny_model_dir, batch, temperature=0.7)
    torch.testing.assert_close(from_config, expected, atol=1e-5, rtol=0)
    batch.meta["temperature"] = 1.3
    from_meta = worker.compute_log_prob(batch)["old_log_probs"]
    torch.testing.assert_close(from_meta, plain_log_probs(tiny_model_dir, batch, temperature=1.3), atol=1e-5, rtol=0)
    assert not torch.allclose(from_meta, from_config)
    batch.meta["temperature"] = 0.0
    with pytest.raises(RLCoreError, match="temperature"):
        worker.compute_log_prob(batch)


def test_gradient_accumulation_matches_one_micro_batch(make_worker: Callable[..., Any], tiny_tokenizer: Any) -> None:
    """Micro-batches of 1 with accumulation give the gradient of one micro-batch of 4 (same mini-batch).

    The gradients are compared through Adam's first moment after one step (``(1 − β1)·g``); the
    parameters only loosely, because Adam's first step ``lr·g/(|g| + ε)`` magnifies rounding noise in
    gradients near zero.
    """
    from rlcore_testkit.contracts.backend import make_batch

    results = []
    for micro in (4, 1):
        worker = make_worker(
            "actor",
            actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=micro,
            actor_rollout_ref__actor__loss_agg_mode="seq-mean-token-mean",
        )
        batch = with_old_log_probs(worker, make_batch(tiny_tokenizer))
        batch["advantages"] = torch.linspace(-1.0, 1.0, batch["advantages"].numel()).reshape(batch["advantages"].shape)
        metrics = worker.update_actor(batch).meta["metrics"]
        results.append((metrics, full_state(worker), optimizer_state(worker)))
    (big, big_params, big_moments), (small, small_params, small_moments) = results
    assert small["actor/grad_norm"] == pytest.approx(big["actor/grad_norm"], rel=1e-5)
    assert small["actor/pg_loss"] == pytest.approx(big["actor/pg_loss"], abs=1e-6)
    for name, tensor in big_moments.items():
        if name.endswith("exp_avg"):
            torch.testing.assert_close(small_moments[name], tensor, rtol=1e-4, atol=1e-9)
    for name, tensor in big_params.items():
        torch.testing.assert_close(small_params[name], tensor, rtol=0, atol=5e-5)


def test_mini_batches_and_epochs_set_the_number_of_optimizer_steps(
    make_worker: Callable[..., Any], batch: Batch
) -> None:
    """4 responses in mini-batches of 2 (prompts × n = 1 × 2) over 2 epochs is 4 optimizer steps."""
    worker = make_worker(
        "actor",
        actor_rollout_ref__rollout__n=2,
        actor_rollout_ref__actor__ppo_mini_batch_size=1,
        actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=1,
        actor_rollout_ref__actor__ppo_epochs=2,
        actor_rollout_ref__actor__shuffle=True,
    )
    metrics = worker.update_actor(with_old_log_probs(worker, batch)).meta["metrics"]
    steps = {int(state["step"]) for state in worker.actor.optimizer.state.values()}
    assert steps == {4}
    assert metrics["actor/grad_norm_nonfinite"] == 0.0


def test_nonfinite_gradient_skips_the_step(make_worker: Callable[..., Any], batch: Batch) -> None:
    """A NaN advantage gives a NaN gradient norm: no optimizer step, parameters unchanged, counted."""
    worker = make_worker("actor")
    batch = with_old_log_probs(worker, batch)
    batch["advantages"][0, 0] = math.nan
    before = full_state(worker)
    metrics = worker.update_actor(batch).meta["metrics"]
    assert metrics["actor/grad_norm_nonfinite"] == 1.0
    assert math.isnan(metrics["actor/grad_norm"])
    assert not worker.actor.optimizer.state, "the optimizer stepped"
    for name, tensor in full_state(worker).items():
        assert torch.equal(tensor, before[name]), name
    assert all(p.grad is None for p in worker.actor.module.parameters())


def test_lr_schedule_steps_once_per_update(make_worker: Callable[..., Any], batch: Batch) -> None:
    """``actor/lr`` reports the rate each update used; the warm-up advances once per ``update_actor``."""
    worker = make_worker(
        "actor",
        actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=4,
        actor_rollout_ref__actor__optim__lr_warmup_steps=2,
        actor_rollout_ref__actor__optim__lr=1e-3,
    )
    batch = with_old_log_probs(worker, batch)
    rates = [worker.update_actor(batch).meta["metrics"]["actor/lr"] for _ in range(3)]
    assert rates == pytest.approx([0.0, 5e-4, 1e-3])


def test_kl_loss_metrics(make_worker: Callable[..., Any], batch: Batch) -> None:
    """With ``use_kl_loss`` the update reports ``actor/kl_loss`` (0 against an identical reference)."""
    worker = make_worker("actor_rollout_ref", actor_rollout_ref__actor__use_kl_loss=True)
    batch = with_old_log_probs(worker, batch)
    batch.union(worker.compute_ref_log_prob(batch))
    metrics = worker.update_actor(batch).meta["metrics"]
    assert metrics["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["actor/kl_coef"] == pytest.approx(0.001)


def test_weight_sync_checks_the_engine(make_worker: Callable[..., Any], batch: Batch, monkeypatch: Any) -> None:
    """Sync pushes the trained weights; a tampered or stale engine fails the check with an error. (The
    copying sync: on one CPU rank the engine otherwise serves the actor's own tensors, see
    ``tests/test_shared_weights.py``.)"""
    worker = make_worker("actor_rollout")
    monkeypatch.setattr(worker.actor, "live_weights", lambda: None)
    worker.sync_weights()
    worker.update_actor(with_old_log_probs(worker, batch))
    metrics = worker.sync_weights()
    assert metrics["rollout/weight_checksum_diff"] <= 1e-6
    assert metrics["rollout/weight_version"] == 3.0
    engine_state = worker.rollout_engine.module.state_dict()
    for name, tensor in worker.full_state_dict().items():
        assert torch.equal(engine_state[name], tensor), name

    with torch.no_grad():
        next(worker.rollout_engine.module.parameters()).add_(1.0)
    with pytest.raises(WeightSyncError, match="weight sync failed: the rollout engine does not serve"):
        worker.check_weight_sync()

    monkeypatch.setattr(worker.rollout_engine, "update_weights", lambda named_tensors: None)
    with pytest.raises(WeightSyncError):
        worker.sync_weights()
    monkeypatch.undo()
    assert worker.sync_weights()["rollout/weight_checksum_diff"] <= 1e-6


def test_roles_without_a_part_refuse_its_methods(make_worker: Callable[..., Any], batch: Batch) -> None:
    """A ``ref`` worker computes reference log-probs only; other methods name the missing part."""
    worker = make_worker("ref")
    assert worker.actor is None and worker.rollout_engine is None
    assert worker.compute_ref_log_prob(batch)["ref_log_prob"].shape == batch["responses"].shape
    with pytest.raises(RLCoreError, match="needs the actor"):
        worker.update_actor(batch)
    with pytest.raises(RLCoreError, match="needs the rollout"):
        worker.generate_sequences(batch)
