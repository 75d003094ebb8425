"""The HF engine's token budget (``rollout.max_num_batched_tokens``): chunked generation samples the same
tokens as one unchunked pass, no forward pass holds more rows than the budget allows, and a bad budget is
refused naming the key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from rlcore.config import load_config
from rlcore.errors import RLCoreError
from rlcore.rollout.chunking import chunk_slices, trim_left_padding
from rlcore.rollout.hf import HFRolloutEngine
from rlcore.rollout.row_noise import MAX_BLOCK_DRAWS, block_steps
from rlcore.testing.contracts.rollout import make_prompt_batch

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


@pytest.fixture(autouse=True)
def single_intra_op_thread() -> Iterator[None]:
    """One intra-op thread: the tiny model's ops gain nothing from more on a shared machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def engine(model_dir: Path, tokenizer: Any, budget: int | None, **overrides: Any) -> HFRolloutEngine:
    """An HF engine on the tiny model with token budget ``budget`` (None = unchunked)."""
    config = load_config().actor_rollout_ref.rollout
    config.response_length = RESPONSE_LENGTH
    config.max_num_batched_tokens = budget
    for key, value in overrides.items():
        config[key] = value
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
    assert block_steps(443, 128) == 128 and block_steps(MAX_BLOCK_DRAWS * 2, 128) == 1
