"""What a spawned rank of ``tests/test_plan.py``'s two-rank check runs (imported by name, so that
:func:`rlcore_testkit.ranks.spawn` can pickle :func:`run_rank`; it holds no tests): an FSDP2 actor sharded over
two gloo ranks, one backward pass and one optimizer step, and the bytes of its local shards."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch


class Settings(TrainingBackendContract):
    """The contract's small config for the ``fsdp`` backend (not a test class)."""

    component_name = "fsdp"


def local_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of the distinct storages under the tensors' local shards (FSDP2 pads each parameter's rows to
    the rank count; shards that share one buffer count once)."""
    storages = {}
    for tensor in tensors:
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        storages[local.untyped_storage().data_ptr()] = local.untyped_storage().nbytes()
    return int(sum(storages.values()))


def run_rank(rank: int, world_size: int, store_file: str, model_dir: str, out_dir: str) -> None:
    """Join a gloo group through a ``FileStore``, build the actor as ``rank`` of ``world_size``, run one
    backward pass and optimizer step and write the local bytes to ``out_dir/rank<r>.json``."""
    from transformers import AutoTokenizer

    from rlcore.workers.actor import ActorRolloutRefWorker

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_file, world_size), rank=rank, world_size=world_size)
    try:
        config = Settings.make_config(Path(model_dir), **{"algorithm.adv_estimator": "grpo"})
        worker = ActorRolloutRefWorker(config, "actor", rank, world_size)
        try:
            worker.init_model()
            engine = worker.actor
            batch = make_batch(AutoTokenizer.from_pretrained(model_dir), response_length=6).chunk(world_size)[rank]
            engine.forward_backward(
                [batch],
                lambda i, micro, out: -(out.log_probs * micro["response_mask"]).sum(),
                temperature=1.0,
                with_entropy=False,
            )
            params = list(engine.module.parameters())
            result = {
                "actor_params": local_bytes(params),
                "actor_grads": local_bytes([p.grad for p in params if p.grad is not None]),
            }
            engine.optimizer_step(1.0)
            result["actor_optimizer"] = local_bytes(
                [v for state in engine.optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
            )
        finally:
            worker.shutdown()
    finally:
        dist.destroy_process_group()
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(result))
