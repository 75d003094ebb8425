"""Dynamic batching (``use_dynamic_bsz``): token-budget micro-batches, order restored, same results."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from rlcore_testkit.contracts.backend import make_batch

from rlcore.api.batch import Batch
from rlcore.errors import RLCoreError
from rlcore.workers.micro_batches import plan_micro_batches

PROMPTS = ("what is 3 + 4", "john has 5 apples and mary has more", "cost", "how many oranges are left", "a", "the sum")
DYNAMIC = {
    "actor_rollout_ref__actor__use_dynamic_bsz": True,
    "actor_rollout_ref__actor__ppo_max_token_len_per_gpu": 24,
    "actor_rollout_ref__rollout__log_prob_max_token_len_per_gpu": 24,
    "actor_rollout_ref__ref__log_prob_max_token_len_per_gpu": 24,
}


@pytest.fixture
def ragged(tiny_tokenizer: Any) -> Batch:
    """Six rows with prompts and responses of different lengths (valid lengths 10 … 17)."""
    return make_batch(tiny_tokenizer, prompts=PROMPTS, response_length=8, seed=5)


def test_plan_respects_the_budget_and_restores_the_order(ragged: Batch) -> None:
    """Every micro-batch fits the budget, the rows are a permutation, and ``restore`` undoes it exactly."""
    lengths = ragged["attention_mask"].sum(-1)
    budget = int(lengths.max()) + 8
    plan = plan_micro_batches(ragged, budget=budget, budget_key="k", device=torch.device("cpu"))
    assert 1 < len(plan.parts) < len(ragged)
    assert sorted(plan.order.tolist()) == list(range(len(ragged)))
    assert all(int(part["attention_mask"].sum()) <= budget for part in plan.parts)
    assert len(plan.parts) <= -(-int(lengths.sum()) // budget) + 1
    restored = plan.restore([part["input_ids"] for part in plan.parts])
    assert torch.equal(restored, ragged["input_ids"])
    fixed = plan_micro_batches(ragged, size=4, device=torch.device("cpu"))
    assert [len(part) for part in fixed.parts] == [4, 2] and fixed.order is None


def test_a_sequence_longer_than_the_budget_is_an_error_naming_the_key(ragged: Batch) -> None:
    """verl 0.9.1 (PR #7553): the budget bounds every micro-batch, so a row over it is an error naming the budget
    key and the tokens it needs; a budget of exactly the longest row runs."""
    lengths = ragged["attention_mask"].sum(-1)
    key = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"
    longest = int(lengths.max())
    message = rf"a sequence of {longest} tokens exceeds {key}={longest - 1}.*at least {longest}"
    with pytest.raises(RLCoreError, match=message):
        plan_micro_batches(ragged, budget=longest - 1, budget_key=key, device=torch.device("cpu"))
    plan = plan_micro_batches(ragged, budget=longest, budget_key=key, device=torch.device("cpu"))
    assert all(int(part["attention_mask"].sum()) <= longest for part in plan.parts)


def test_dynamic_log_probs_equal_fixed(make_worker: Callable[..., Any], ragged: Batch) -> None:
    """Log-probs, entropies and reference log-probs in token-budget micro-batches equal the fixed ones,
    row for row (token budgets with packing: ``test_multirank.py``)."""
    worker = make_worker("actor_ref")
    fixed = worker.compute_log_prob(ragged)
    fixed_ref = worker.compute_ref_log_prob(ragged)["ref_log_prob"]
    worker.log_prob_budget = worker.ref_budget = 24
    dynamic = worker.compute_log_prob(ragged)
    mask = ragged["response_mask"].bool()
    for key in ("old_log_probs", "entropys"):
        torch.testing.assert_close(dynamic[key][mask], fixed[key][mask], atol=1e-5, rtol=1e-5)
    dynamic_ref = worker.compute_ref_log_prob(ragged)["ref_log_prob"]
    torch.testing.assert_close(dynamic_ref[mask], fixed_ref[mask], atol=1e-5, rtol=1e-5)


def test_dynamic_update_equals_fixed_update(make_worker: Callable[..., Any], ragged: Batch) -> None:
    """With token-mean over responses of unequal lengths, token-budget micro-batches give the same update
    as one micro-batch holding the whole mini-batch (the loss is normalised by the mini-batch's tokens)."""
    results = []
    for overrides in ({"actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu": 6}, DYNAMIC):
        worker = make_worker(
            "actor",
            actor_rollout_ref__actor__ppo_mini_batch_size=6,
            actor_rollout_ref__actor__loss_agg_mode="token-mean",
            actor_rollout_ref__actor__entropy_coeff=0.01,
            **overrides,
        )
        data = ragged.select()
        data["old_log_probs"] = worker.compute_log_prob(data)["old_log_probs"]
        data["advantages"] = torch.linspace(-1, 1, data["old_log_probs"].numel()).view_as(data["old_log_probs"])
        metrics = worker.update_actor(data).meta["metrics"]
        results.append((metrics, worker.full_state_dict()))
    (fixed_metrics, fixed_state), (dynamic_metrics, dynamic_state) = results
    assert dynamic_metrics["actor/grad_norm"] == pytest.approx(fixed_metrics["actor/grad_norm"], rel=1e-5)
    for name, tensor in fixed_state.items():
        torch.testing.assert_close(dynamic_state[name], tensor, rtol=0, atol=5e-5)


def test_dynamic_critic_values_equal_fixed(make_worker: Callable[..., Any], ragged: Batch) -> None:
    """The critic's values in token-budget micro-batches come back in row order, equal to the fixed ones."""
    worker = make_worker(
        "critic",
        critic__optim__lr=1e-2,
        critic__use_dynamic_bsz=True,
        critic__ppo_max_token_len_per_gpu=24,
        critic__ppo_mini_batch_size=6,
    )
    ragged["values"] = worker.compute_values(ragged)["values"]
    ragged["returns"] = torch.linspace(-1, 1, ragged["values"].numel()).view_as(ragged["values"])
    worker.update_critic(ragged)
    dynamic = worker.compute_values(ragged)["values"]
    worker.forward_budget = None
    torch.testing.assert_close(dynamic, worker.compute_values(ragged)["values"], atol=1e-5, rtol=1e-5)
