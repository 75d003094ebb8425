"""Multi-rank checks of Ulysses sequence parallelism for any training backend (gloo processes on the CPU).

:func:`spawn_ranks` runs :func:`run_rank` in ``world_size`` processes (:func:`rlcore_testkit.ranks.spawn`, a
``FileStore`` rendezvous); :func:`run_case` is the same code for one rank of one process. Each rank
builds the actor worker of ``strategy`` with ``ulysses_sequence_parallel_size`` ``sp``, takes its data-
parallel chunk of :func:`global_batch` (the ranks of a sequence-parallel group take the same chunk),
computes log-probs and entropies, runs one update with gradient accumulation over micro-batches of 2 rows,
and computes the log-probs again; then the same for the critic (values, one update toward the advantages
as returns, values again). A test compares every rank's results with :func:`run_case` at
``sp=1`` in one process::

    one = run_case("fsdp", model_dir, packed=False)
    ranks = spawn_ranks("fsdp", model_dir, tmp_path, world_size=2, sp=2)
    assert_matches(ranks, {False: one}, sp=2)

The batch is 8 rows of 23 columns (odd: they do not split evenly over 2 ranks), with prompts and responses
of different lengths, so that packed micro-batches of 2 rows have odd lengths too (17 and 23 tokens).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rlcore.api import ROUTED_EXPERTS, Batch
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
from rlcore_testkit.ranks import spawn

#: prompts of different lengths (left padding) for the global batch
PROMPTS = (
    "john has 5 apples and mary has more apples than john",
    "how many oranges are left",
    "what is the total cost of the apples",
    "first think then answer",
    "cost",
    "a",
    "sum of the numbers",
    "left",
)
#: rows of the global batch, and responses per row
ROWS, RESPONSE_LENGTH = len(PROMPTS), 9


def global_batch(model_dir: Path) -> Batch:
    """The 8-row batch every layout trains on: left-padded prompts, responses of 9, 8 and 7 tokens."""
    from transformers import AutoTokenizer

    return make_batch(
        AutoTokenizer.from_pretrained(model_dir), prompts=PROMPTS, response_length=RESPONSE_LENGTH, seed=5
    )


def run_case(
    strategy: str,
    model_dir: Path,
    *,
    packed: bool,
    rank: int = 0,
    world_size: int = 1,
    sp: int = 1,
    overrides: dict[str, Any] | None = None,
    packed_overrides: dict[str, Any] | None = None,
) -> dict[str, torch.Tensor | float]:
    """Log-probs and entropies, the update's gradient norm and the log-probs after it, and the critic's
    values, its gradient norm and values after one update, for this rank's data-parallel chunk
    (``packed``: ``use_remove_padding``, with ``packed_overrides`` on top of ``overrides``)."""
    from rlcore.api import ActorRolloutRefWorker, CriticWorker

    class Settings(TrainingBackendContract):
        component_name = strategy

    config = Settings.make_config(
        model_dir,
        **{
            "data.train_batch_size": ROWS,
            "actor_rollout_ref.actor.ppo_mini_batch_size": ROWS,
            "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
            "actor_rollout_ref.actor.entropy_coeff": 0.01,
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size": sp,
            "actor_rollout_ref.model.use_remove_padding": packed,
            "critic.ulysses_sequence_parallel_size": sp,
            "critic.model.use_remove_padding": packed,
            "critic.ppo_micro_batch_size_per_gpu": 2,
            "critic.optim.lr": 1e-2,
            **(overrides or {}),
            **((packed_overrides or {}) if packed else {}),
        },
    )
    dp_size, dp_rank = world_size // sp, rank // sp
    batch = global_batch(model_dir)
    advantages = torch.linspace(-1.0, 1.0, batch["responses"].numel()).view_as(batch["responses"])
    chunk = batch.chunk(dp_size)[dp_rank]
    chunk["advantages"] = advantages.chunk(dp_size)[dp_rank].clone()
    worker = ActorRolloutRefWorker(config, "actor", rank, world_size)
    try:
        worker.init_model()
        before = worker.compute_log_prob(chunk)
        chunk["old_log_probs"] = before["old_log_probs"]
        if ROUTED_EXPERTS in before:  # router_replay.mode=R2: the update replays the recorded routes
            chunk[ROUTED_EXPERTS] = before[ROUTED_EXPERTS]
        grad_norm = worker.update_actor(chunk).meta["metrics"]["actor/grad_norm"]
        after = worker.compute_log_prob(chunk)["old_log_probs"]
    finally:
        worker.shutdown()
    critic = CriticWorker(config, "critic", rank, world_size)
    try:
        critic.init_model()
        chunk["values"] = critic.compute_values(chunk)["values"]
        chunk["returns"] = chunk["advantages"]
        critic_norm = critic.update_critic(chunk).meta["metrics"]["critic/grad_norm"]
        new_values = critic.compute_values(chunk)["values"]
    finally:
        critic.shutdown()
    return {
        "log_probs": before["old_log_probs"].clone(),
        "entropy": before["entropys"].clone(),
        "grad_norm": grad_norm,
        "new_log_probs": after.clone(),
        "values": chunk["values"].clone(),
        "critic_grad_norm": critic_norm,
        "new_values": new_values.clone(),
        "mask": chunk["response_mask"].clone(),
    }


def run_rank(
    rank: int,
    world_size: int,
    store_file: str,
    strategy: str,
    model_dir: str,
    out_dir: str,
    sp: int,
    overrides: dict[str, Any],
    packed_overrides: dict[str, Any],
) -> None:
    """A spawned rank: join a gloo group, run :func:`run_case` padded and packed, save ``rank<r>.pt``."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_file, world_size), rank=rank, world_size=world_size)
    try:
        results = {
            packed: run_case(
                strategy,
                Path(model_dir),
                packed=packed,
                rank=rank,
                world_size=world_size,
                sp=sp,
                overrides=overrides,
                packed_overrides=packed_overrides,
            )
            for packed in (False, True)
        }
    finally:
        dist.destroy_process_group()
    torch.save(results, Path(out_dir) / f"rank{rank}.pt")


def spawn_ranks(
    strategy: str,
    model_dir: Path,
    out_dir: Path,
    *,
    world_size: int,
    sp: int,
    overrides: dict[str, Any] | None = None,
    packed_overrides: dict[str, Any] | None = None,
) -> list[dict[bool, dict[str, Any]]]:
    """Every rank's ``{packed: run_case(...)}`` from ``world_size`` spawned gloo processes (``packed_overrides``
    only in the packed case)."""
    args = (
        world_size,
        str(out_dir / "store"),
        strategy,
        str(model_dir),
        str(out_dir),
        sp,
        overrides or {},
        packed_overrides or {},
    )
    spawn(run_rank, args=args, nprocs=world_size)
    return [torch.load(out_dir / f"rank{rank}.pt", weights_only=False) for rank in range(world_size)]


def assert_matches(
    ranks: list[dict[bool, dict[str, Any]]],
    one: dict[bool, dict[str, Any]],
    *,
    sp: int,
    atol: float = 1e-5,
    update_atol: float = 1e-4,
) -> None:
    """Each rank's log-probs, entropies and values equal the one-process ones of its data-parallel chunk
    within ``atol`` and its log-probs and values after the updates within ``update_atol`` (on the response
    tokens); the gradient norms agree."""
    dp_size = len(ranks) // sp
    for rank, result in enumerate(ranks):
        for packed, reference in one.items():
            got = result[packed]
            mask = reference["mask"].chunk(dp_size)[rank // sp].bool()
            assert torch.equal(got["mask"].bool(), mask)
            checks = (("log_probs", atol), ("entropy", atol), ("values", atol))
            for name, tol in (*checks, ("new_log_probs", update_atol), ("new_values", update_atol)):
                expected = reference[name].chunk(dp_size)[rank // sp]
                where = f"rank {rank} packed={packed} {name}"

                def message(detail: str, where: str = where) -> str:
                    return f"{where}: {detail}"

                torch.testing.assert_close(got[name][mask], expected[mask], atol=tol, rtol=0, msg=message)
            for name in ("grad_norm", "critic_grad_norm"):
                assert abs(got[name] - reference[name]) <= 1e-4 * reference[name], (rank, packed, name)
