"""Context parallelism over gloo: cp=2 on two ranks equals one rank.

Each rank holds half of every sequence's tokens (megatron-core's load-balanced chunks); attention all-gathers
keys and values. Log-probs before and after one PPO update, the gradient norm and the gathered weights equal
the single-rank run on a batch of padded rows of several lengths whose width is not a multiple of ``2·cp``;
a checkpoint (whose header records cp) resumed by fresh workers continues exactly like the uninterrupted run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.tiny import make_tiny_model_dir


def test_load_balanced_positions() -> None:
    """Rank ``r`` of ``C`` holds chunks ``r`` and ``2C − 1 − r``; together the ranks hold every position once;
    a width that does not split is an error."""
    from rlcore_plugin_megatron.context_parallel import cp_positions

    assert cp_positions(8, 2, 0).tolist() == [0, 1, 6, 7]
    assert cp_positions(8, 2, 1).tolist() == [2, 3, 4, 5]
    every = torch.cat([cp_positions(12, 3, r) for r in range(3)])
    assert sorted(every.tolist()) == list(range(12))
    with pytest.raises(ValueError, match="multiple of 4"):
        cp_positions(6, 2, 0)


def test_cp2_equals_one_rank(jobs: Any, tmp_path: Path) -> None:
    model_dir = make_tiny_model_dir(tmp_path / "model", num_layers=2)
    batch = jobs.global_batch(model_dir)
    assert batch["input_ids"].shape[1] % 4 != 0, "the batch must exercise the engine's padding to 2·cp"
    assert len(set(batch["attention_mask"].sum(-1).tolist())) > 1
    reference = jobs.run_layout("tp1", model_dir, 0)
    results = jobs.spawn_world(2, {"cp2": ("layout", "cp2", model_dir)}, tmp_path)["cp2"]
    # both ranks are one data-parallel rank; context-parallel rank 0 is the output rank
    assert [r["output"] for r in results] == [True, False] and {r["dp_size"] for r in results} == {1}
    for rank, result in enumerate(results):
        torch.testing.assert_close(result["before"], reference["before"], atol=1e-5, rtol=0, msg=f"rank {rank}")
        torch.testing.assert_close(result["after"], reference["after"], atol=1e-5, rtol=0, msg=f"rank {rank}")
        assert result["grad_norm"] == pytest.approx(reference["grad_norm"], rel=1e-5)
        for name, tensor in reference["state"].items():
            torch.testing.assert_close(result["state"][name], tensor, atol=1e-5, rtol=0, msg=f"rank {rank}: {name}")
        torch.testing.assert_close(result["resumed"], result["second"], atol=0, rtol=0, msg=f"rank {rank}")
    assert not torch.equal(results[0]["second"], results[0]["after"])
    shards = sorted(path.name for path in (tmp_path / "cp2" / "ckpt").rglob("*.pt") if path.parent.name == "model")
    assert shards == ["tp00_pp00.pt"]
    header = torch.load(next((tmp_path / "cp2" / "ckpt").rglob("model/tp00_pp00.pt")), weights_only=True)["layout"]
    assert header["context_parallel_size"] == 2
