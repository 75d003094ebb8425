"""FSDP2 across two gloo ranks: an update on two halves of a batch equals the one-rank update on all of it.

Two processes (:func:`rlcore_testkit.ranks.spawn`, a ``FileStore`` rendezvous) each build the worker as rank
``r`` of 2 and train on their half; this process runs the same scenarios as a single rank on the whole
batch. The losses are normalised by the global token count (``token-mean`` over responses of unequal
lengths), so the gradients and hence the parameters agree to float tolerance.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.ranks import spawn

#: Adam's first step is lr·g/(|g| + ε): summation-order noise in gradients near zero moves a parameter by
#: up to a few learning rates' worth of that noise, so parameters are compared loosely, gradient norms tightly
PARAM_ATOL = 5e-5


@pytest.fixture(scope="module")
def jobs() -> Iterator[Any]:
    """The :mod:`multirank_jobs` helper module, importable by name in spawned processes."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(Path(__file__).parent))
        import multirank_jobs

        yield multirank_jobs
        sys.modules.pop("multirank_jobs", None)


@pytest.fixture(scope="module")
def results(jobs: Any, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``{"one": {scenario: result}, "two": [rank 0's, rank 1's]}``; the one-rank run goes on in this process
    while the two ranks run."""
    out = tmp_path_factory.mktemp("multirank")
    ranks = spawn(jobs.run_rank, args=(2, str(out / "store"), str(tiny_model_dir), str(out)), nprocs=2, join=False)
    one = jobs.run_scenarios(tiny_model_dir)
    while not ranks.join():
        pass
    two = [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(2)]
    return {"one": one, "two": two}


@pytest.mark.parametrize("scenario", ["token_mean", "dynamic_packed", "lora", "critic"])
def test_two_ranks_match_one_rank(results: dict[str, Any], scenario: str) -> None:
    """Both ranks end with the one-rank parameters and gradient norm; each rank's old log-probs are its
    half of the one-rank log-probs (the dynamic scenario: token-budget micro-batches, packed sequences,
    different micro-batch needs per rank; the LoRA scenario: merged adapter weights)."""
    one = results["one"][scenario]
    for rank, two in enumerate(results["two"]):
        two = two[scenario]
        assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-5)
        assert two["state"].keys() == one["state"].keys()
        for name, tensor in one["state"].items():
            torch.testing.assert_close(two["state"][name], tensor, rtol=0, atol=PARAM_ATOL, msg=f"rank {rank}: {name}")
        if "old_log_probs" in one:
            half = one["old_log_probs"].chunk(2)[rank]
            torch.testing.assert_close(two["old_log_probs"], half, rtol=1e-5, atol=1e-5)


def test_two_ranks_match_one_rank_under_bf16_autocast(results: dict[str, Any]) -> None:
    """``fsdp_config.cpu_autocast`` on FSDP2-sharded parameters: two ranks agree with one rank up to bf16
    rounding. Each micro-batch's weight gradients are rounded to bf16 before they are summed, and the ranks
    sum other groups, so the gradient norm agrees to 1 % and Adam's first step (about ``lr · sign(g)``) to
    one step of a learning rate where a gradient near zero changed sign; most parameters agree exactly."""
    one = results["one"]["cpu_autocast"]
    lr = 1e-3  # the contract config's actor.optim.lr
    for rank, two in enumerate(results["two"]):
        two = two["cpu_autocast"]
        assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-2)
        torch.testing.assert_close(two["old_log_probs"], one["old_log_probs"].chunk(2)[rank], rtol=0, atol=2e-2)
        float32 = results["two"][rank]["token_mean"]["old_log_probs"]  # the same scenario without autocast
        assert not torch.equal(two["old_log_probs"], float32), "the two ranks computed in bf16"
        close = total = 0
        for name, tensor in one["state"].items():
            difference = (two["state"][name] - tensor).abs()
            assert float(difference.max()) <= 2 * lr + 1e-5, f"rank {rank}: {name}"
            close += int((difference <= PARAM_ATOL).sum())
            total += difference.numel()
        assert close / total > 0.95, f"rank {rank}: only {close / total:.1%} of the parameters agree"
