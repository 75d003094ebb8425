"""Tensor and pipeline parallelism over gloo: TP=2, PP=2, TP=2×PP=2, TP=2×DP=2, TP=2 with every layer
recomputed in the backward pass (``model.enable_gradient_checkpointing``) and TP=2 with the sequence split
over the tensor-parallel ranks (``megatron.sequence_parallel``) equal TP=1.

The layouts of two ranks run one after the other in one spawned gloo group of two processes (``FileStore``
rendezvous), those of four ranks in one group of four, on a tiny GQA model with two key/value heads; this
process runs TP=1 on the whole batch. Every rank returns its data-parallel chunk's log-probs
before and after one PPO update with two micro-batches, the gradient norm and the gathered Hugging Face
weights, which must all equal the single-rank run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.tiny import make_tiny_model_dir

#: the layouts spawned against the single-rank run
LAYOUTS = ("tp2", "pp2", "tp2pp2", "tp2dp2", "tp2_recompute", "tp2sp")


@pytest.fixture(scope="module")
def gqa_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2 model with 4 query heads in 2 groups (so that 2 tensor-parallel ranks split it)."""
    return make_tiny_model_dir(tmp_path_factory.mktemp("gqa"), hidden_size=128, num_heads=4, num_kv_heads=2)


@pytest.fixture(scope="module")
def reference(jobs: Any, gqa_model_dir: Path) -> dict[str, Any]:
    """The single-rank (TP=1, PP=1) result on the whole batch."""
    import torch.distributed as dist

    result = jobs.run_layout("tp1", gqa_model_dir, 0)
    assert not dist.is_initialized()
    return result


@pytest.fixture(scope="module")
def two_ranks(jobs: Any, gqa_model_dir: Path, qk_norm_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Every two-rank run of this file in one spawned group of two processes: the layouts of :data:`LAYOUTS`
    with two ranks, TP=2 on the query/key-norm model (``qk_norm``) and the critic at TP=2 with the sequence split
    (``critic``); ``{tag: [rank 0's result, rank 1's]}``."""
    scenarios = {layout: ("layout", layout, gqa_model_dir) for layout in LAYOUTS if jobs.LAYOUTS[layout][0] == 2}
    scenarios["qk_norm"] = ("layout", "tp2", qk_norm_model_dir)
    scenarios["critic"] = ("critic", "tp2sp", gqa_model_dir)
    return jobs.spawn_world(2, scenarios, tmp_path_factory.mktemp("two_ranks"))


@pytest.fixture(scope="module")
def four_ranks(jobs: Any, gqa_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The layouts of :data:`LAYOUTS` with four ranks, in one spawned group of four processes."""
    scenarios = {layout: ("layout", layout, gqa_model_dir) for layout in LAYOUTS if jobs.LAYOUTS[layout][0] == 4}
    return jobs.spawn_world(4, scenarios, tmp_path_factory.mktemp("four_ranks"))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_equals_single_rank(
    jobs: Any, reference: dict[str, Any], layout: str, request: pytest.FixtureRequest
) -> None:
    """Every rank of the layout: its chunk's log-probs before (1e-5) and after (1e-4) the update equal the
    single-rank ones, the gradient norm agrees (1e-4 relative), the gathered weights agree (1e-4), and
    exactly one rank per data-parallel chunk is an output rank."""
    world = jobs.LAYOUTS[layout][0]
    results = request.getfixturevalue("four_ranks" if world == 4 else "two_ranks")[layout]
    dp_size = results[0]["dp_size"]
    assert dp_size == world // (jobs.LAYOUTS[layout][1] * jobs.LAYOUTS[layout][2])
    assert sorted(r["dp_rank"] for r in results if r["output"]) == list(range(dp_size))
    assert {r["recompute"] for r in results} == {"full" if layout in jobs.RECOMPUTE else None}
    assert {r["sequence_parallel"] for r in results} == {layout in jobs.SEQUENCE_PARALLEL}
    for rank, result in enumerate(results):
        rows = slice(result["dp_rank"] * 4 // dp_size, (result["dp_rank"] + 1) * 4 // dp_size)
        torch.testing.assert_close(result["before"], reference["before"][rows], atol=1e-5, rtol=0, msg=f"rank {rank}")
        torch.testing.assert_close(result["after"], reference["after"][rows], atol=1e-4, rtol=0, msg=f"rank {rank}")
        assert result["grad_norm"] == pytest.approx(reference["grad_norm"], rel=1e-4)
        assert result["state"].keys() == reference["state"].keys()
        for name, tensor in reference["state"].items():
            torch.testing.assert_close(result["state"][name], tensor, atol=1e-4, rtol=0, msg=f"rank {rank}: {name}")


@pytest.fixture(scope="module")
def qk_norm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen3 model (query/key norms, perturbed away from 1) with 4 query heads in 2 groups."""
    from rlcore_testkit.tiny import build_tokenizer, padded_vocab_size
    from transformers import Qwen3Config, Qwen3ForCausalLM

    path = tmp_path_factory.mktemp("qwen3")
    tokenizer = build_tokenizer(None)
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=padded_vocab_size(tokenizer),
        hidden_size=128,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                param.add_(torch.randn_like(param) * 0.2)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_query_key_norms_split_over_heads_equal_single_rank(jobs: Any, qk_norm_model_dir: Path, two_ranks: Any) -> None:
    """TP=2 on a model with query/key norms (each rank normalises its own heads, so each holds part of the norms'
    gradient, summed over the tensor-parallel group) equals TP=1: gradient norm, log-probs after the update and
    the updated norm weights."""
    reference = jobs.run_layout("tp1", qk_norm_model_dir, 0)
    for result in two_ranks["qk_norm"]:
        assert result["grad_norm"] == pytest.approx(reference["grad_norm"], rel=1e-4)
        torch.testing.assert_close(result["after"], reference["after"], atol=1e-4, rtol=0)
        for name in [name for name in reference["state"] if name.endswith(("q_norm.weight", "k_norm.weight"))]:
            torch.testing.assert_close(result["state"][name], reference["state"][name], atol=1e-5, rtol=0, msg=name)


def test_critic_with_sequence_parallelism_equals_single_rank(jobs: Any, gqa_model_dir: Path, two_ranks: Any) -> None:
    """A critic at TP=2 with the sequence split (its value head gathers the sequence first, as the language-model
    head it replaces does): values after one update (1e-5) and the gradient norm (1e-4 relative) equal TP=1's."""
    reference = jobs.run_critic("tp1", gqa_model_dir, 0)
    assert reference["values"].abs().max() > 1e-3  # the update moved the values away from the zero head
    for rank, result in enumerate(two_ranks["critic"]):
        torch.testing.assert_close(result["values"], reference["values"], atol=1e-5, rtol=0, msg=f"rank {rank}")
        assert result["grad_norm"] == pytest.approx(reference["grad_norm"], rel=1e-4)
