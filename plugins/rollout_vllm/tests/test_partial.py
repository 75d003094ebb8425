"""Partial rollout on vLLM (``TokenListEngine.generate_partial``) beyond the contract: a first chunk samples the
start of what ``generate`` samples (the row seed is the request seed), and continued requests stay within the
response length and ``max_model_len``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from rlcore_testkit.contracts.rollout import make_prompt_batch

SAMPLING = {"calculate_log_probs": True, "temperature": 0.7}


def test_a_first_chunk_is_the_start_of_a_generate_call(make_engine: Callable[..., Any], tiny_tokenizer: Any) -> None:
    """Chunk 1 (3 tokens) equals the first 3 tokens of ``generate`` at the same call index; the chunks then
    run to the end without exceeding the response length."""
    engine = make_engine(**SAMPLING)
    batch = make_prompt_batch(tiny_tokenizer)
    whole = engine.generate(batch)
    engine.load_state_dict({"calls": 0, "weight_version": engine.weight_version})
    out = engine.generate_partial(batch, 3)
    length = whole["responses"].shape[1]
    kept = out["response_mask"].sum(dim=1)
    assert bool((kept <= 3).all())
    for row in range(len(batch)):
        count = int(kept[row])
        assert torch.equal(out["responses"][row, :count], whole["responses"][row, :count])
        torch.testing.assert_close(
            out["rollout_log_probs"][row, :count], whole["rollout_log_probs"][row, :count], atol=1e-5, rtol=0
        )
    while not bool(out["finished"].all()):
        out = engine.generate_partial(out, 3)
    assert bool((out["response_mask"].sum(dim=1) <= length).all())
    assert engine.state_dict()["calls"] == 1, "continued rows must not draw new seeds"
