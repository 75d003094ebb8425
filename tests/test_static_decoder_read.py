"""Decoding with static shapes reads only the filled part of the KV cache: each step attends its read-length
bucket (:func:`rlcore_plugin_hf.chunking.read_length`), and samples exactly — the same tokens, bit-identical
log-probs — what a step attending the whole cache samples, while reading fewer key/value bytes."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from rlcore_plugin_hf import engine as hf
from rlcore_plugin_hf.chunking import READ_BUCKETS, read_length
from rlcore_testkit.contracts.rollout import make_prompt_batch

from tests.test_rollout_static import MORE_PROMPTS, engine_on, qwen3_model

pytestmark = pytest.mark.usefixtures("single_intra_op_thread")


def whole_cache(filled: int, cache_len: int) -> int:
    """The read length before read buckets: every step attends the whole cache."""
    return cache_len


@pytest.mark.parametrize("cache_len", [7, 32, 100, 1088, 4160])
def test_read_buckets_cover_the_filled_positions(cache_len: int) -> None:
    """Every filled length gets a bucket that covers it, within the cache, at most one block over; a cache
    has at most READ_BUCKETS of them, and the last one is the whole cache."""
    buckets = {read_length(filled, cache_len) for filled in range(1, cache_len + 1)}
    assert len(buckets) <= READ_BUCKETS
    assert max(buckets) == cache_len
    block = min(buckets)
    for filled in range(1, cache_len + 1):
        read = read_length(filled, cache_len)
        assert filled <= read <= min(cache_len, filled + block - 1)


def test_bucketed_reads_sample_exactly_what_whole_cache_reads_sample(
    tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bucketed decode (static shapes: the CUDA-graph path without capture) with read-length buckets
    gives the same tokens and bit-identical log-probs as the same decode attending the whole cache, same
    seed; the steps read fewer key/value bytes (the figures bench/decode_kernels.py prints at scale)."""
    model = qwen3_model(tiny_tokenizer)
    batch = make_prompt_batch(tiny_tokenizer, MORE_PROMPTS)
    overrides = {"response_length": 40, "ignore_eos": True, "calculate_log_probs": True, "temperature": 0.8}
    reads: dict[str, list[int]] = {"bucketed": [], "whole": []}

    def recording(name: str, choose: Any) -> Any:
        def chosen(filled: int, cache_len: int) -> int:
            reads[name].append(choose(filled, cache_len))
            return reads[name][-1]

        return chosen

    outputs = {}
    for name, choose in (("bucketed", read_length), ("whole", whole_cache)):
        monkeypatch.setattr(hf, "read_length", recording(name, choose))
        engine = engine_on(model, tiny_tokenizer, bucketed=True, **overrides)
        outputs[name] = engine.generate(batch)
    bucketed, whole = outputs["bucketed"], outputs["whole"]
    assert torch.equal(bucketed["responses"], whole["responses"])
    assert torch.equal(bucketed["rollout_log_probs"], whole["rollout_log_probs"])
    assert len(reads["bucketed"]) == len(reads["whole"]) == 39
    assert len(set(reads["bucketed"])) > 1  # several buckets were attended
    assert sum(reads["bucketed"]) < sum(reads["whole"])


def test_a_reserved_cache_long_enough_is_kept(tiny_tokenizer: Any) -> None:
    """A call whose prompts are narrower (or with fewer rows) keeps the cache it finds — the tensors CUDA
    graphs read stay the same, so they are not captured again — and a call that needs more rows or
    positions gets a new one."""
    from rlcore_plugin_hf.static_decoder import StaticDecoder, supports

    model = qwen3_model(tiny_tokenizer)
    assert supports(model)
    decoder = StaticDecoder(model)
    decoder.reserve(4, 64)
    version, keys = decoder.version, decoder.keys[0]
    decoder.reserve(2, 48)
    assert decoder.version == version and decoder.keys[0] is keys
    assert (decoder.rows, decoder.length) == (4, 64)
    decoder.reserve(8, 48)
    assert decoder.version > version and (decoder.rows, decoder.length) == (8, 48)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need CUDA")
def test_cuda_graphs_are_captured_once_per_shape_across_calls(tiny_tokenizer: Any) -> None:
    """A call with narrower prompts and fewer rows reuses the cache of a wider one (before, a different
    cache length reallocated it and every graph was captured again), so the graphs captured by the first
    call are replayed by the later ones; there is one per read-length bucket reached."""
    model = qwen3_model(tiny_tokenizer)
    engine = engine_on(model, tiny_tokenizer, device="cuda", response_length=56, ignore_eos=True)
    wide = make_prompt_batch(tiny_tokenizer, MORE_PROMPTS)
    narrow = make_prompt_batch(tiny_tokenizer, ["x", "a b"])
    assert wide["input_ids"].shape[1] + 56 > 64 >= narrow["input_ids"].shape[1] + 56  # two cache lengths
    engine.generate(wide)
    assert engine._graphs is not None and engine._static is not None and engine._graphs.failure is None
    first = dict(engine._graphs._graphs)
    version = engine._static.version
    assert 1 < len(first) <= READ_BUCKETS
    engine.generate(narrow)
    out = engine.generate(wide)
    assert engine._static.version == version
    assert all(engine._graphs._graphs.get(key) is graph for key, graph in first.items())
    assert out.meta["metrics"]["rollout/graph_step_share"] == 1.0
