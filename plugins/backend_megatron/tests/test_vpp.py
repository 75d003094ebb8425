"""Interleaved (virtual) pipeline stages over gloo: pp=2 × vpp=2 on a 4-layer model equals one rank.

Two spawned ranks each hold two model chunks of one layer (rank 0: layers 0 and 2, rank 1: layers 1 and 3).
Their log-probs before and after one PPO update, the gradient norm and the gathered weights equal the
single-rank run; the Hugging Face export loads with ``transformers`` and gives the same log-probs; a
checkpoint resumed by fresh workers continues exactly like the uninterrupted run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.tiny import make_tiny_model_dir


@pytest.fixture(scope="module")
def four_layer_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2 model with four layers: two pipeline ranks × two virtual stages of one layer each."""
    return make_tiny_model_dir(tmp_path_factory.mktemp("four-layers"), num_layers=4)


def test_chunks_are_interleaved() -> None:
    """Chunk ``c`` of pipeline rank ``r`` is global chunk ``c × pp + r``; sizes that do not divide are named."""
    from rlcore_plugin_megatron.convert import chunk_layers

    from rlcore.errors import RLCoreError

    assert chunk_layers(8, 2, 2, 0, "k") == [range(0, 2), range(4, 6)]
    assert chunk_layers(8, 2, 2, 1, "k") == [range(2, 4), range(6, 8)]
    assert chunk_layers(4, 2, 1, 1, "k") == [range(2, 4)]
    with pytest.raises(RLCoreError, match=r"k: pipeline_model_parallel_size \(2\) × virtual.*\(3\) = 6 must divide"):
        chunk_layers(4, 2, 3, 0, "k")


def test_pp2_vpp2_equals_one_rank(jobs: Any, four_layer_model_dir: Path, tmp_path: Path) -> None:
    reference = jobs.run_layout("tp1", four_layer_model_dir, 0)
    results = jobs.spawn_world(2, {"pp2vpp2": ("layout", "pp2vpp2", four_layer_model_dir)}, tmp_path)["pp2vpp2"]
    assert [r["output"] for r in results] == [False, True] and {r["dp_size"] for r in results} == {1}
    assert [r["chunk_layers"] for r in results] == [[[0], [2]], [[1], [3]]]
    for rank, result in enumerate(results):
        torch.testing.assert_close(result["before"], reference["before"], atol=1e-5, rtol=0, msg=f"rank {rank}")
        torch.testing.assert_close(result["after"], reference["after"], atol=1e-5, rtol=0, msg=f"rank {rank}")
        assert result["grad_norm"] == pytest.approx(reference["grad_norm"], rel=1e-5)
        assert result["state"].keys() == reference["state"].keys()
        for name, tensor in reference["state"].items():
            torch.testing.assert_close(result["state"][name], tensor, atol=1e-5, rtol=0, msg=f"rank {rank}: {name}")
        # resumed from the checkpoint, fresh workers make the same second update
        torch.testing.assert_close(result["resumed"], result["second"], atol=0, rtol=0, msg=f"rank {rank}")
    assert not torch.equal(results[0]["second"], results[0]["after"])

    batch = jobs.global_batch(four_layer_model_dir)
    mask = batch["response_mask"].bool()
    exported = jobs.exported_log_probs(tmp_path / "pp2vpp2" / "hf", batch)
    torch.testing.assert_close(exported[mask], reference["after"][mask], atol=1e-5, rtol=0)
