"""FSDP2 across two gloo ranks with a vision-language model: each rank's half of an image batch gives the
one-rank log-probs and update (packed sequences, ``freeze_vision_tower``: frozen and trained parameters in
the same sharded groups)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from rlcore_testkit.ranks import spawn

OVERRIDES = {
    "actor_rollout_ref.actor.freeze_vision_tower": True,
    "actor_rollout_ref.model.use_remove_padding": True,
    "actor_rollout_ref.actor.optim.lr": 1e-2,
}


def run_actor(model_dir: Path, rank: int, world_size: int) -> dict[str, Any]:
    """Old log-probs of this rank's consecutive share of the 4-row image batch, then one update; the
    gradient norm and the full weights."""
    from test_vlm_training import VLMSettings, training_batch

    from rlcore.processors import load_processor
    from rlcore.workers.actor import ActorRolloutRefWorker

    batch = training_batch(load_processor(model_dir))
    share = batch.chunk(world_size)[rank]
    worker = ActorRolloutRefWorker(VLMSettings.make_config(model_dir, **OVERRIDES), "actor", rank, world_size)
    worker.init_model()
    try:
        share["old_log_probs"] = worker.compute_log_prob(share)["old_log_probs"]
        share["advantages"] = torch.ones_like(share["old_log_probs"])
        metrics = worker.update_actor(share).meta["metrics"]
        state = {name: tensor.detach().clone() for name, tensor in worker.full_state_dict().items()}
    finally:
        worker.shutdown()
    return {"old_log_probs": share["old_log_probs"], "grad_norm": metrics["actor/grad_norm"], "state": state}


def run_rank(rank: int, world_size: int, store_file: str, model_dir: str, out_dir: str) -> None:
    """A spawned rank: join a gloo group through a ``FileStore``, run the actor, save the result."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_file, world_size), rank=rank, world_size=world_size)
    try:
        result = run_actor(Path(model_dir), rank, world_size)
    finally:
        dist.destroy_process_group()
    torch.save(result, Path(out_dir) / f"rank{rank}.pt")


def test_two_ranks_match_one_rank_on_image_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from rlcore_testkit.tiny_vlm import build_tiny_vlm

    # the spawned ranks import this module (and test_vlm_training) by name from the tests folder
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    jobs = importlib.import_module("test_vlm_multirank")
    model_dir = build_tiny_vlm(tmp_path / "vlm")
    args = (2, str(tmp_path / "store"), str(model_dir), str(tmp_path))
    ranks = spawn(jobs.run_rank, args=args, nprocs=2, join=False)
    try:
        one = jobs.run_actor(model_dir, 0, 1)
        while not ranks.join():
            pass
    finally:
        for name in ("test_vlm_multirank", "test_vlm_training"):
            monkeypatch.delitem(sys.modules, name, raising=False)
    for rank in range(2):
        two = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        torch.testing.assert_close(two["old_log_probs"], one["old_log_probs"].chunk(2)[rank], rtol=1e-5, atol=1e-5)
        assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-4)
        for name, tensor in one["state"].items():
            torch.testing.assert_close(two["state"][name], tensor, rtol=0, atol=5e-5, msg=f"rank {rank}: {name}")
