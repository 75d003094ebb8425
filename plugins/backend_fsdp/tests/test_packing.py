"""Sequence packing (``use_remove_padding``): packed and padded forwards agree for the actor and the critic, and
the packed ones never build an ``nnz × nnz`` attention mask (:mod:`rlcore.modelkit.packed_attention`)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import pytest
import torch
from rlcore_testkit.attention import AttentionProbe
from rlcore_testkit.contracts.backend import make_batch

from rlcore.api.batch import Batch
from rlcore.errors import RLCoreError
from rlcore.modelkit.packing import pack_batch

PROMPTS = ("what is 3 + 4", "john has 5 apples and mary has more", "cost", "how many oranges are left", "a")


@pytest.fixture
def ragged(tiny_tokenizer: Any) -> Batch:
    """Left-padded prompts of five lengths and right-padded responses of lengths 8, 7, 6, 8, 7."""
    return make_batch(tiny_tokenizer, prompts=PROMPTS, response_length=8, seed=3)


def test_pack_batch_layout(ragged: Batch) -> None:
    """One row of the attended tokens, positions restarting per sequence, one kept output per response token."""
    packed = pack_batch(ragged, "key")
    mask = ragged["attention_mask"].bool()
    assert packed.input_ids.shape == (1, int(mask.sum()))
    assert torch.equal(packed.input_ids[0], ragged["input_ids"][mask])
    assert (packed.position_ids[0] == 0).sum() == len(ragged)
    assert packed.keep_index.numel() == int(ragged["response_mask"].sum())
    # the kept output for a response token sits right before that token in the packed row
    assert torch.equal(packed.input_ids[0, packed.keep_index + 1], ragged["responses"][packed.rows, packed.cols])


def test_pack_batch_rejects_positions_that_do_not_restart(ragged: Batch) -> None:
    """Position ids that do not count from 0 per sequence cannot be packed; the error names the key."""
    ragged["position_ids"] = ragged["position_ids"] + 1
    with pytest.raises(RLCoreError, match="critic.model.use_remove_padding"):
        pack_batch(ragged, "critic.model.use_remove_padding")


def _micro_batch_tokens(batch: Batch, size: int) -> set[int]:
    """The packed row length of each micro-batch of ``size`` rows."""
    return {int(part.sum()) for part in batch["attention_mask"].split(size)}


def _assert_no_square_masks(probe: AttentionProbe, lengths: set[int]) -> None:
    """No tensor of ``[..., nnz, nnz]`` for any packed row length, and every attention call causal and unmasked."""
    assert probe.calls and all(call.causal and not call.masked for call in probe.calls)
    for nnz in lengths:
        assert not probe.squares(nnz), nnz


def test_packed_log_probs_and_entropies_equal_padded(make_worker: Callable[..., Any], ragged: Batch) -> None:
    """Same actor, same batch: packed log-probs and entropies equal the padded ones on every response token,
    so the packed attention isolates the sequences; outside the mask the packed values are 0. The packed
    micro-batches attend without an ``nnz × nnz`` mask."""
    worker = make_worker("actor", actor_rollout_ref__rollout__log_prob_micro_batch_size_per_gpu=2)
    padded = worker.compute_log_prob(ragged)
    worker.actor.remove_padding = True
    with AttentionProbe() as probe:
        packed = worker.compute_log_prob(ragged)
    _assert_no_square_masks(probe, _micro_batch_tokens(ragged, 2))
    mask = ragged["response_mask"].bool()
    for key in ("old_log_probs", "entropys"):
        torch.testing.assert_close(packed[key][mask], padded[key][mask], atol=1e-5, rtol=1e-5)
        assert torch.count_nonzero(packed[key][~mask]) == 0


def test_packed_values_equal_padded(make_worker: Callable[..., Any], ragged: Batch) -> None:
    """Critic values from a packed forward equal the padded forward's (after one update, so the head is
    not zero)."""
    worker = make_worker("critic", critic__optim__lr=1e-2)
    ragged["values"] = worker.compute_values(ragged)["values"]
    ragged["returns"] = torch.linspace(-1, 1, ragged["values"].numel()).view_as(ragged["values"])
    worker.update_critic(ragged)
    padded = worker.compute_values(ragged)["values"]
    assert torch.count_nonzero(padded) > 0
    worker.critic.remove_padding = True
    with AttentionProbe() as probe:
        packed = worker.compute_values(ragged)["values"]
    torch.testing.assert_close(packed, padded, atol=1e-5, rtol=1e-5)
    _assert_no_square_masks(probe, {int(ragged["attention_mask"].sum())})


def test_packed_update_equals_padded_update(make_worker: Callable[..., Any], ragged: Batch) -> None:
    """A PPO update through packed forwards gives the padded update's loss, gradient norm and parameters;
    neither its forward nor its backward creates an ``nnz × nnz`` tensor."""
    results = []
    probe = AttentionProbe()
    for packed in (False, True):
        worker = make_worker(
            "actor",
            actor_rollout_ref__model__use_remove_padding=packed,
            actor_rollout_ref__actor__ppo_mini_batch_size=5,
            actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=5,
            actor_rollout_ref__actor__entropy_coeff=0.01,
        )
        data = ragged.select()
        data["old_log_probs"] = worker.compute_log_prob(data)["old_log_probs"]
        data["advantages"] = torch.linspace(-1, 1, data["old_log_probs"].numel()).view_as(data["old_log_probs"])
        with probe if packed else nullcontext():
            metrics = worker.update_actor(data).meta["metrics"]
        results.append((metrics, worker.full_state_dict()))
    _assert_no_square_masks(probe, {int(ragged["attention_mask"].sum())})
    (padded_metrics, padded_state), (packed_metrics, packed_state) = results
    assert packed_metrics["actor/pg_loss"] == pytest.approx(padded_metrics["actor/pg_loss"], abs=1e-6)
    assert packed_metrics["actor/grad_norm"] == pytest.approx(padded_metrics["actor/grad_norm"], rel=1e-5)
    for name, tensor in padded_state.items():
        torch.testing.assert_close(packed_state[name], tensor, rtol=0, atol=5e-5)


def test_pack_batch_pads_the_row_to_the_multiple(ragged: Batch) -> None:
    """``pad_to_length``: the packed row ends in a padding sequence of its own (token 0, positions from 0) that
    rounds it up to the multiple; the real tokens, their positions and the kept outputs do not move."""
    plain = pack_batch(ragged, "key")
    nnz = plain.input_ids.shape[1]
    packed = pack_batch(ragged, "key", 32)
    padding = -nnz % 32
    assert padding > 0 and packed.padding == padding
    assert packed.input_ids.shape == (1, nnz + padding) and (nnz + padding) % 32 == 0
    assert torch.equal(packed.input_ids[0, :nnz], plain.input_ids[0])
    assert torch.equal(packed.input_ids[0, nnz:], torch.zeros(padding, dtype=packed.input_ids.dtype))
    assert torch.equal(packed.position_ids[0, nnz:], torch.arange(padding))
    assert packed.lengths == (*plain.lengths, padding) and sum(packed.lengths) == nnz + padding
    assert torch.equal(packed.keep_index, plain.keep_index)
    assert pack_batch(ragged, "key", nnz).padding == 0


def _row_lengths(worker: Any) -> list[int]:
    """Starts recording the length of every row the worker's model embeds; returns the (growing) list."""
    lengths: list[int] = []
    embeddings = worker.actor.module.get_input_embeddings()
    embeddings.register_forward_pre_hook(lambda _module, args: lengths.append(int(args[0].shape[-1])))
    return lengths


def test_padded_packed_micro_batches_give_the_same_log_probs_and_update(
    make_worker: Callable[..., Any], ragged: Batch
) -> None:
    """``actor.pad_to_length`` with a bucket of 32: every packed micro-batch reaches the model padded to a multiple
    of 32 tokens, and the log-probs, entropies, loss, gradient norm and updated parameters equal the unpadded
    packed run's (the padding is its own sequence and is never kept)."""
    results = []
    for pad in (False, True):
        worker = make_worker(
            "actor",
            actor_rollout_ref__model__use_remove_padding=True,
            actor_rollout_ref__actor__pad_to_length=pad,
            actor_rollout_ref__actor__pad_to_length_bucket=32,
            actor_rollout_ref__actor__ppo_mini_batch_size=5,
            actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu=5,
            actor_rollout_ref__rollout__log_prob_micro_batch_size_per_gpu=2,
            actor_rollout_ref__actor__entropy_coeff=0.01,
        )
        lengths = _row_lengths(worker)
        data = ragged.select()
        outputs = worker.compute_log_prob(data)
        data["old_log_probs"] = outputs["old_log_probs"]
        data["advantages"] = torch.linspace(-1, 1, data["old_log_probs"].numel()).view_as(data["old_log_probs"])
        metrics = worker.update_actor(data).meta["metrics"]
        results.append((outputs, metrics, worker.full_state_dict(), lengths))
    (plain, plain_metrics, plain_state, plain_lengths), (padded, metrics, state, lengths) = results
    real = sorted(_micro_batch_tokens(ragged, 2) | {int(ragged["attention_mask"].sum())})
    assert sorted(set(plain_lengths)) == real
    assert lengths and all(n % 32 == 0 for n in lengths)
    assert sorted(set(lengths)) == sorted({-(-n // 32) * 32 for n in real})
    mask = ragged["response_mask"].bool()
    for key in ("old_log_probs", "entropys"):
        torch.testing.assert_close(padded[key][mask], plain[key][mask], atol=1e-5, rtol=1e-5)
    assert metrics["actor/pg_loss"] == pytest.approx(plain_metrics["actor/pg_loss"], abs=1e-6)
    assert metrics["actor/grad_norm"] == pytest.approx(plain_metrics["actor/grad_norm"], rel=1e-5)
    for name, tensor in plain_state.items():
        torch.testing.assert_close(state[name], tensor, rtol=0, atol=5e-5)


def test_padded_packed_values_equal_unpadded(make_worker: Callable[..., Any], ragged: Batch) -> None:
    """``critic.fsdp_config.pad_to_length`` (verl's spelling): the critic's packed row is padded to the bucket and
    its values are the unpadded packed row's."""
    values = []
    for pad in (False, True):
        worker = make_worker(
            "critic",
            critic__model__use_remove_padding=True,
            critic__fsdp_config__pad_to_length=pad,
            critic__fsdp_config__pad_to_length_bucket=64,
        )
        lengths: list[int] = []
        embeddings = worker.critic.module.backbone.get_input_embeddings()
        embeddings.register_forward_pre_hook(lambda _module, args, seen=lengths: seen.append(int(args[0].shape[-1])))
        worker.critic.module.value_head.bias.data.fill_(0.5)
        worker.critic.module.value_head.weight.data.normal_(generator=torch.Generator().manual_seed(0))
        values.append(worker.compute_values(ragged)["values"])
        assert lengths == [
            -(-int(ragged["attention_mask"].sum()) // 64) * 64 if pad else int(ragged["attention_mask"].sum())
        ]
    assert torch.count_nonzero(values[0]) > 0
    torch.testing.assert_close(values[1], values[0], atol=1e-5, rtol=1e-5)


def test_pad_to_length_needs_packing(make_worker: Callable[..., Any]) -> None:
    """``pad_to_length`` without ``use_remove_padding`` (nothing is packed) is refused naming both keys, and so is a
    bucket that is not a positive integer."""
    with pytest.raises(
        RLCoreError,
        match=r"actor_rollout_ref.actor.pad_to_length=true .*actor_rollout_ref.model.use_remove_padding=true",
    ):
        make_worker("actor", actor_rollout_ref__actor__pad_to_length=True)
    with pytest.raises(RLCoreError, match="actor_rollout_ref.actor.pad_to_length_bucket must be a positive integer"):
        make_worker(
            "actor",
            actor_rollout_ref__model__use_remove_padding=True,
            actor_rollout_ref__actor__pad_to_length=True,
            actor_rollout_ref__actor__pad_to_length_bucket=0,
        )
