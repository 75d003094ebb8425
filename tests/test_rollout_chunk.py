"""How the HF engine chunks a call: on CPU by its token budget (``rollout.max_num_batched_tokens``) —
chunked generation samples the same tokens as one unchunked pass, no forward pass holds more rows than the
budget allows, a bad budget is refused naming the key — and on an accelerator by free memory (the
arithmetic with given figures, buckets, even chunks); the run plan's line says which rule applies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_plugin_hf.chunking import (
    chunk_slices,
    describe_chunking,
    even_chunks,
    memory_rows,
    trim_left_padding,
)
from rlcore_plugin_hf.engine import HFRolloutEngine
from rlcore_testkit.contracts.rollout import make_prompt_batch

from rlcore.api import ModelShape, RolloutConfig, bucket, bucket_floor, default_section, row_bytes
from rlcore.config import load_config
from rlcore.errors import RLCoreError

pytestmark = pytest.mark.usefixtures("single_intra_op_thread")

#: prompts of different lengths, so that chunks trim different amounts of left padding
PROMPTS = [
    "hello",
    "the quick brown fox jumps over the lazy dog",
    "a b",
    "what is two plus two",
    "once upon a time there was a tiny model that",
    "x",
    "numbers 1 2 3 4 5",
]
RESPONSE_LENGTH = 12


def engine(model_dir: Path, tokenizer: Any, budget: int | None, **overrides: Any) -> HFRolloutEngine:
    """An HF engine on the tiny model with token budget ``budget`` (None = unchunked)."""
    config = default_section(RolloutConfig, response_length=RESPONSE_LENGTH, max_num_batched_tokens=budget, **overrides)
    return HFRolloutEngine(str(model_dir), tokenizer, config)


@pytest.mark.parametrize(
    "overrides",
    [
        {"calculate_log_probs": True},
        {"temperature": 0.8, "top_k": 20, "top_p": 0.9, "calculate_log_probs": True},
        {"ignore_eos": True},
    ],
)
def test_chunked_generation_samples_the_same_tokens(
    tiny_model_dir: Path, tiny_tokenizer: Any, overrides: dict[str, Any]
) -> None:
    """Chunks of 1, 2 and 3 rows sample exactly what one pass over all rows samples, over two calls."""
    batch = make_prompt_batch(tiny_tokenizer, PROMPTS)
    width = batch["input_ids"].shape[1] + RESPONSE_LENGTH
    whole = engine(tiny_model_dir, tiny_tokenizer, None, **overrides)
    chunked = [engine(tiny_model_dir, tiny_tokenizer, rows * width, **overrides) for rows in (1, 2, 3)]
    for _call in range(2):  # the second call draws from new per-row seeds
        expected = whole.generate(batch)
        assert int(expected["response_mask"].sum()) > len(PROMPTS)
        for other in chunked:
            out = other.generate(batch)
            assert torch.equal(out["responses"], expected["responses"])
            assert torch.equal(out["response_mask"], expected["response_mask"])
            assert torch.equal(out["input_ids"], expected["input_ids"])
            if "rollout_log_probs" in expected:
                torch.testing.assert_close(out["rollout_log_probs"], expected["rollout_log_probs"], atol=1e-5, rtol=0)
    # rows are seeded per row: identical prompts in one batch still draw different samples
    same = make_prompt_batch(tiny_tokenizer, ["hello"] * 6)
    responses = engine(tiny_model_dir, tiny_tokenizer, width, ignore_eos=True).generate(same)["responses"]
    assert len({tuple(row.tolist()) for row in responses}) > 1


def test_greedy_calls_do_not_advance_the_seed_stream(tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
    """A greedy (validation) call between two sampling calls leaves the second one's tokens unchanged, so
    validating or not does not change training (and a resume restores the stream exactly)."""
    batch = make_prompt_batch(tiny_tokenizer, PROMPTS)
    plain, validating = (engine(tiny_model_dir, tiny_tokenizer, None, ignore_eos=True) for _ in range(2))
    plain.generate(batch)
    validating.generate(batch)
    validating.generate(batch, validate=True)
    assert validating.state_dict()["calls"] == plain.state_dict()["calls"] == 1
    assert torch.equal(plain.generate(batch)["responses"], validating.generate(batch)["responses"])


def test_no_forward_pass_exceeds_the_budget(tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
    """With a budget of two rows' tokens, every forward of the output head sees at most two rows."""
    batch = make_prompt_batch(tiny_tokenizer, PROMPTS)
    width = batch["input_ids"].shape[1] + RESPONSE_LENGTH
    hf = engine(tiny_model_dir, tiny_tokenizer, 2 * width + 1, ignore_eos=True)
    rows_seen: list[int] = []
    hf.module.get_output_embeddings().register_forward_hook(lambda _m, _a, out: rows_seen.append(out.shape[0]))
    out = hf.generate(batch)
    assert out["responses"].shape == (len(PROMPTS), RESPONSE_LENGTH)
    assert max(rows_seen) == 2 and sum(rows_seen) == len(PROMPTS) * RESPONSE_LENGTH


@pytest.mark.parametrize("bad", [0, -5, 1.5, "8k", True])
def test_bad_budget_names_the_key(tiny_model_dir: Path, tiny_tokenizer: Any, bad: Any) -> None:
    """A budget that is not a positive integer (or null) is refused naming the key."""
    with pytest.raises(RLCoreError, match=r"actor_rollout_ref\.rollout\.max_num_batched_tokens"):
        engine(tiny_model_dir, tiny_tokenizer, bad)


def test_chunk_slices_and_trimming() -> None:
    """Row ranges cover every row once, at least one row per chunk; shared left padding is dropped."""
    assert chunk_slices(7, 10, 25) == [slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 7)]
    assert chunk_slices(3, 10, 5) == [slice(0, 1), slice(1, 2), slice(2, 3)]
    assert chunk_slices(3, 10, None) == [slice(0, 3)]
    assert chunk_slices(0, 10, 5) == [slice(0, 0)]
    mask = torch.tensor([[0, 0, 1, 1], [0, 0, 0, 1]])
    ids = torch.arange(8).view(2, 4)
    trimmed_ids, trimmed_mask, trimmed_pos = trim_left_padding(ids, mask, (mask.cumsum(-1) - 1).clamp(min=0))
    assert trimmed_ids.tolist() == [[2, 3], [6, 7]] and trimmed_mask.tolist() == [[1, 1], [0, 1]]
    assert trimmed_pos.tolist() == [[0, 1], [0, 0]]


def test_memory_rows_from_given_figures() -> None:
    """The accelerator rule with round numbers (GiB): 80 total, 30 free, 12 reserved of which 10 allocated,
    4 of this engine's cache reusable: in use 80 - 30 - 2 - 4 = 44; allowed 0.9 x 80 - 44 = 28; at 0.5 GiB
    a row, 56 rows. At utilization 1 everything free, cached or reusable is allowed; too little is an
    error naming the key and the figures."""
    gib = 2**30
    figures = {"total": 80 * gib, "free": 30 * gib, "reserved": 12 * gib, "allocated": 10 * gib}
    assert memory_rows(**figures, reusable=4 * gib, utilization=0.9, per_row=gib // 2) == 56
    assert memory_rows(**figures, reusable=4 * gib, utilization=1.0, per_row=gib) == 30 + 2 + 4
    assert memory_rows(**figures, reusable=0, utilization=0.7, per_row=3 * gib) == 2  # (56 - 48) // 3
    with pytest.raises(RLCoreError, match=r"gpu_memory_utilization=0\.5 leaves 0\.00 GiB .*\(48\.00 GiB of 80\.00"):
        memory_rows(**figures, reusable=0, utilization=0.5, per_row=gib)


def test_row_bytes_of_qwen3_1_7b() -> None:
    """A row of Qwen3-1.7B's shape in bf16, 512 + 256 tokens: 84 MiB of KV cache (2 x 28 layers x 8 heads x
    128 x 2 bytes x 768) plus the prefill's activations, masks and a step's vocabulary temporaries."""
    shape = ModelShape(layers=28, hidden=2048, intermediate=6144, heads=16, kv_heads=8, head_dim=128, vocab=151_936)
    kv = 2 * 28 * 8 * 128 * 2 * 768
    assert kv == 84 * 2**20
    prefill = 512 * (4 * 2048 + 32 * 128 + 3 * 6144) * 2 + 2 * 512 * 512 * 5
    assert row_bytes(shape, 512, 768, 2) == kv + prefill + 16 * 4 * 151_936


def test_buckets_and_even_chunks() -> None:
    """Buckets are 1, 2, 4, 8, multiples of 16 to 256, then of 64; the floor is the largest bucket not
    above; even chunks are as few and as equal as the capacity allows."""
    assert [bucket(n) for n in (1, 2, 3, 5, 8, 9, 16, 17, 250, 256, 257, 320, 321)] == [
        1, 2, 4, 8, 8, 16, 16, 32, 256, 256, 320, 320, 384,
    ]  # fmt: skip
    for rows in range(1, 700):
        floor = bucket_floor(rows)
        assert bucket(floor) == floor <= rows < (bucket(floor + 1) if floor < rows else rows + 1)
    assert even_chunks(480, 256) == [slice(0, 240), slice(240, 480)]
    assert even_chunks(7, 3) == [slice(0, 3), slice(3, 5), slice(5, 7)]
    assert even_chunks(5, 10) == [slice(0, 5)] and even_chunks(0, 4) == [slice(0, 0)]


def test_plan_line_names_the_rule_for_the_device() -> None:
    """The run plan's line: rows per chunk on CPU, the memory rule and graphs on CUDA, both on ``auto``;
    another engine has none; a bad utilization is an error naming the key."""
    overrides = ["data.max_prompt_length=512", "data.max_response_length=256"]
    cpu = describe_chunking(load_config(overrides=[*overrides, "trainer.device=cpu"]))
    assert cpu is not None and "on CPU 10 rows per chunk" in cpu and "max_num_batched_tokens=8192" in cpu
    assert "accelerator" not in cpu
    cuda = describe_chunking(load_config(overrides=[*overrides, "trainer.device=cuda"]))
    assert cuda is not None and "sized from free memory" in cuda and "gpu_memory_utilization=0.5" in cuda
    assert "CUDA graphs" in cuda and "on CPU" not in cuda
    eager = describe_chunking(
        load_config(overrides=["trainer.device=cuda", "actor_rollout_ref.rollout.enforce_eager=true"])
    )
    assert eager is not None and "eager decoding steps" in eager
    both = describe_chunking(load_config(overrides=overrides))
    assert both is not None and "on CPU" in both and "on an accelerator" in both
    assert describe_chunking(load_config(overrides=["actor_rollout_ref.rollout.name=vllm"])) is None
    with pytest.raises(RLCoreError, match=r"actor_rollout_ref\.rollout\.gpu_memory_utilization must be"):
        describe_chunking(load_config(overrides=["actor_rollout_ref.rollout.gpu_memory_utilization=1.5"]))
