"""Routing record and replay under Ulysses sequence parallelism (``tests/test_moe_training.py``): one process
against the ranks of a gloo group that split each sequence. It reaches into rlcore's model kit (the routers, the
response forward), so it lives with the tests, not in the test kit that plugins import."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from rlcore_testkit.ranks import spawn
from rlcore_testkit.sequence_parallel import global_batch
from transformers import AutoModelForCausalLM

from rlcore.api import ROUTED_EXPERTS
from rlcore.modelkit import moe
from rlcore.modelkit.hf_models import response_outputs
from rlcore.modelkit.sequence_parallel import install, new_sequence_parallel


def routing_case(model_dir: Path, *, packed: bool, rank: int = 0, world_size: int = 1) -> dict[str, torch.Tensor]:
    """Routing record and replay of a mixture-of-experts model on the whole :func:`global_batch`, with the
    ranks of a ``world_size`` process group splitting each sequence (Ulysses; 1: one process): the routes the
    log-prob pass records; then, with every router's weights negated (so that routing afresh differs), the
    log-probs and routes of a pass that replays the recorded routes and the log-probs of one that does not."""
    key = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    routing = moe.attach(model, "actor_rollout_ref.model")
    sp = new_sequence_parallel(world_size, rank, world_size, key)
    if sp is not None:
        install(model, sp, key)
    batch = global_batch(model_dir)

    def forward(**kwargs: Any) -> Any:
        with torch.no_grad():
            return response_outputs(
                model, batch, 1.0, with_entropy=False, remove_padding=packed, sp=sp, moe=routing, **kwargs
            )

    recorded = forward(record_routing=True).routed_experts
    batch[ROUTED_EXPERTS] = recorded
    for router in moe.sparse_routers(model):
        router.weight.data.mul_(-1.0)
    replayed = forward(record_routing=True, replay_routing=True)
    return {
        "recorded": recorded,
        "replayed_routes": replayed.routed_experts,
        "replayed": replayed.log_probs,
        "fresh": forward().log_probs,
        "mask": batch["response_mask"].bool(),
    }


def run_routing_rank(rank: int, world_size: int, store_file: str, model_dir: str, out_dir: str) -> None:
    """A spawned rank: join a gloo group, run :func:`routing_case` padded and packed, save ``routing<r>.pt``."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_file, world_size), rank=rank, world_size=world_size)
    try:
        results = {
            packed: routing_case(Path(model_dir), packed=packed, rank=rank, world_size=world_size)
            for packed in (False, True)
        }
    finally:
        dist.destroy_process_group()
    torch.save(results, Path(out_dir) / f"routing{rank}.pt")


def spawn_routing_ranks(model_dir: Path, out_dir: Path, *, world_size: int) -> list[dict[bool, dict[str, Any]]]:
    """Every rank's ``{packed: routing_case(...)}`` from ``world_size`` spawned gloo processes that split each
    sequence between them."""
    args = (world_size, str(out_dir / "routing_store"), str(model_dir), str(out_dir))
    spawn(run_routing_rank, args=args, nprocs=world_size)
    return [torch.load(out_dir / f"routing{rank}.pt", weights_only=False) for rank in range(world_size)]
