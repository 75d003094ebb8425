"""Log-probs at given token ids and the top-k on the Megatron engine with tensor and pipeline parallelism over
gloo: on every rank of TP=2 and of PP=2 they equal log_softmax(logits / T) of a plain transformers forward
(the vocabulary-parallel output layer gathers its shards before they are read), and the update's carry
gradients. Both layouts run one after the other in one spawned gloo group of two processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.tiny import make_tiny_model_dir


@pytest.fixture(scope="module")
def gqa_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2 model with 4 query heads in 2 groups (so that 2 tensor-parallel ranks split it)."""
    return make_tiny_model_dir(tmp_path_factory.mktemp("gqa"), hidden_size=128, num_heads=4, num_kv_heads=2)


def plain_log_probs(model_dir: Path, batch: Any, temperature: float) -> torch.Tensor:
    """``[B, R, V]`` log_softmax of the tempered logits before each response token (plain transformers,
    padded batch with its attention mask and positions)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits.float()
    length = batch["responses"].shape[1]
    return torch.log_softmax(logits[:, -length - 1 : -1] / temperature, dim=-1)


#: the layouts of two ranks the engine runs
LAYOUTS = ("tp2", "pp2")


@pytest.fixture(scope="module")
def ranks(jobs: Any, gqa_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Each layout's :func:`multirank_jobs.token_id_outputs` on both ranks, ``{layout: [rank 0's, rank 1's]}``."""
    scenarios = {layout: ("token_ids", layout, gqa_model_dir) for layout in LAYOUTS}
    return jobs.spawn_world(2, scenarios, tmp_path_factory.mktemp("token_ids"))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_log_probs_at_ids_and_top_k_equal_a_plain_forward(
    jobs: Any, gqa_model_dir: Path, layout: str, ranks: Any
) -> None:
    batch = jobs.global_batch(gqa_model_dir)
    expected = plain_log_probs(gqa_model_dir, batch, temperature=0.7)
    valid = batch["response_mask"].bool()
    top, top_ids = expected.topk(3, dim=-1)
    for rank, result in enumerate(ranks[layout]):
        wanted = expected.gather(-1, result["ids"])
        torch.testing.assert_close(result["gathered"][valid], wanted[valid], atol=1e-4, rtol=0)
        if layout == "pp2" and rank == 0:
            assert result["trained"] is None  # the first pipeline stage runs no loss (the last stage does)
        else:
            assert result["requires_grad"]
            torch.testing.assert_close(result["trained"][valid], wanted[valid], atol=1e-4, rtol=0)
        torch.testing.assert_close(result["top_k_log_probs"][valid], top[valid], atol=1e-4, rtol=0)
        assert torch.equal(result["top_k_ids"][valid], top_ids[valid])
        assert result["grad_norm"] > 0
