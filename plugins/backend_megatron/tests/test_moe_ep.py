"""A tiny Qwen3-MoE on the Megatron engine: expert parallelism over gloo (EP=2 on 2 spawned ranks) equals EP=1,
the FSDP engine's log-probs, the MoE metrics, checkpoint → resume, and the Hugging Face export.

Each layout makes two PPO updates with mixed-sign advantages (GRPO-style: the worker's ``update_actor``, two
micro-batches per rank) with a checkpoint between them; fresh workers resumed from the checkpoint make the same
second update exactly. With EP=2 each rank holds 4 of the 8 experts of every layer, and both ranks are
data-parallel ranks (2 rows of the 4-row batch each); tokens reach the experts through megatron-core's allgather
dispatcher.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.tiny import make_tiny_moe_model_dir

MOE_METRICS = ("actor/moe_aux_loss", "actor/moe_load_max_over_mean")


@pytest.fixture(scope="module")
def moe_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen3-MoE (2 layers, 8 experts, top-2, load-balancing coefficient 0.001)."""
    return make_tiny_moe_model_dir(tmp_path_factory.mktemp("moe"))


def fsdp_log_probs(jobs: Any, model_dir: Path) -> torch.Tensor:
    """The FSDP engine's log-probs of the jobs' global batch (one rank)."""
    from rlcore.workers.actor import ActorRolloutRefWorker

    config = jobs.Settings.make_config(
        model_dir, **{"actor_rollout_ref.actor.strategy": "fsdp", "critic.strategy": "fsdp"}
    )
    worker = ActorRolloutRefWorker(config, "actor", 0, 1)
    try:
        worker.init_model()
        return worker.compute_log_prob(jobs.global_batch(model_dir))["old_log_probs"]
    finally:
        worker.shutdown()


def test_expert_parallel_equals_one_rank_and_fsdp(jobs: Any, moe_model_dir: Path, tmp_path: Path) -> None:
    """EP=2: each rank's log-probs before (1e-5) and after (1e-4) the first update, the gradient norm (1e-4
    relative) and the gathered weights (1e-4) equal EP=1's; the log-probs before equal the FSDP engine's (1e-5);
    both updates of both layouts log the MoE metrics; resumed workers repeat the second update exactly."""
    reference = jobs.run_layout("moe_ep1", moe_model_dir, 0, tmp_path / "ep1")
    results = jobs.spawn_world(2, {"moe_ep2": ("layout", "moe_ep2", moe_model_dir)}, tmp_path)["moe_ep2"]
    batch = jobs.global_batch(moe_model_dir)
    mask = batch["response_mask"].bool()
    fsdp = fsdp_log_probs(jobs, moe_model_dir)
    torch.testing.assert_close(reference["before"][mask], fsdp[mask], atol=1e-5, rtol=0)
    assert [r["dp_rank"] for r in results] == [0, 1] and {r["dp_size"] for r in results} == {2}
    for run in (reference, *results):
        for metrics in (run["metrics"], run["second_metrics"]):
            assert set(MOE_METRICS) <= metrics.keys()
            assert 0.5 < metrics["actor/moe_aux_loss"] < 4.0 and metrics["actor/moe_load_max_over_mean"] >= 1.0
        torch.testing.assert_close(run["resumed"], run["second"], atol=0, rtol=0)
        assert not torch.equal(run["second"], run["after"])
    for rank, result in enumerate(results):
        rows = slice(2 * rank, 2 * rank + 2)
        torch.testing.assert_close(result["before"], reference["before"][rows], atol=1e-5, rtol=0, msg=f"rank {rank}")
        torch.testing.assert_close(result["before"][mask[rows]], fsdp[rows][mask[rows]], atol=1e-5, rtol=0)
        torch.testing.assert_close(result["after"], reference["after"][rows], atol=1e-4, rtol=0, msg=f"rank {rank}")
        assert result["grad_norm"] == pytest.approx(reference["grad_norm"], rel=1e-4)
        assert result["state"].keys() == reference["state"].keys()
        for name, tensor in reference["state"].items():
            torch.testing.assert_close(result["state"][name], tensor, atol=1e-4, rtol=0, msg=f"rank {rank}: {name}")
    assert reference["state"]["model.layers.0.mlp.experts.gate_up_proj"].shape == (8, 64, 64)
    assert sorted(path.name for path in (tmp_path / "moe_ep2" / "ckpt" / "model").iterdir()) == [
        "tp00_pp00_ep00.pt",
        "tp00_pp00_ep01.pt",
    ]

    exported = jobs.exported_log_probs(tmp_path / "moe_ep2" / "hf", batch)
    torch.testing.assert_close(exported[mask], reference["after"][mask], atol=1e-4, rtol=0)
