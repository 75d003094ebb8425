"""Per-row caps on new tokens (``extra_info["max_new_tokens"]``, :func:`rlcore.api.row_token_caps`): the HF
engine stops decoding at the chunk's largest cap and ends each row at its own; a token-list engine cuts each
completion to its cap."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from rlcore_plugin_hf.engine import HFRolloutEngine
from rlcore_testkit.contracts.rollout import make_prompt_batch

from rlcore.api import RLCoreError, RolloutConfig, default_section, row_token_caps
from rlcore.rollout.token_engine import TokenListEngine

pytestmark = pytest.mark.usefixtures("single_intra_op_thread")

LENGTH = 10


def with_caps(batch: Any, caps: list[Any]) -> Any:
    """``batch`` with each row's ``extra_info`` holding its cap (None: no cap for that row)."""
    infos = np.empty(len(caps), dtype=object)
    for row, cap in enumerate(caps):
        infos[row] = {"index": row} if cap is None else {"index": row, "max_new_tokens": cap}
    batch.non_tensors["extra_info"] = infos
    return batch


def hf_engine(model_dir: Path, tokenizer: Any) -> HFRolloutEngine:
    """An HF engine that samples every row to its length (``ignore_eos``), counting its model calls."""
    config = default_section(RolloutConfig, response_length=LENGTH, ignore_eos=True, calculate_log_probs=True)
    engine = HFRolloutEngine(str(model_dir), tokenizer, config)
    engine.calls = 0  # type: ignore[attr-defined]

    def count(*_: Any) -> None:
        engine.calls += 1  # type: ignore[attr-defined]

    engine.module.get_output_embeddings().register_forward_hook(count)
    return engine


def test_caps_read_from_extra_info(tiny_tokenizer: Any) -> None:
    batch = make_prompt_batch(tiny_tokenizer)
    assert row_token_caps(batch, LENGTH) is None
    assert row_token_caps(with_caps(batch, [1, None, 30, 2, 5, np.int64(4)]), LENGTH).tolist() == [1, 10, 10, 2, 5, 4]
    for bad in (0, -3, "5", 2.5, True):
        with pytest.raises(RLCoreError, match=r"extra_info.max_new_tokens of rollout row 2 must be a positive integer"):
            row_token_caps(with_caps(batch, [1, 1, bad, 1, 1, 1]), LENGTH)


def test_hf_engine_ends_each_row_at_its_cap_and_stops_at_the_largest(tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
    caps = [1, 3, 6, 2, 5, 4]
    full_engine = hf_engine(tiny_model_dir, tiny_tokenizer)
    full = full_engine.generate(make_prompt_batch(tiny_tokenizer))
    assert full_engine.calls == LENGTH  # type: ignore[attr-defined]
    engine = hf_engine(tiny_model_dir, tiny_tokenizer)
    out = engine.generate(with_caps(make_prompt_batch(tiny_tokenizer), caps))
    assert engine.calls == max(caps), "decoding went on after every row reached its cap"  # type: ignore[attr-defined]
    assert out["responses"].shape[1] == LENGTH
    assert out["response_mask"].sum(dim=1).tolist() == caps
    pad = tiny_tokenizer.pad_token_id
    for row, cap in enumerate(caps):
        assert torch.equal(out["responses"][row, :cap], full["responses"][row, :cap]), "a cap changed the tokens"
        assert out["responses"][row, cap:].tolist() == [pad] * (LENGTH - cap)
        assert out["rollout_log_probs"][row, cap:].abs().sum() == 0
    assert out.meta["metrics"]["rollout/gen_tokens"] == sum(caps)


class EightTokens(TokenListEngine):
    """A token-list engine whose every completion is tokens 1..8 with log-prob -1, whatever ``max_tokens`` it is
    asked for (which it records)."""

    engine_name = "eight"

    def _complete(self, prompts: list, params: Any, seeds: list, max_tokens: Any = None) -> list:
        self.asked = max_tokens
        return [(list(range(1, 9)), [-1.0] * 8) for _ in prompts]

    def _load_weights(self, state: dict) -> None:
        """Nothing to load."""

    def prompt_log_probs(self, token_ids: Any) -> Any:
        raise NotImplementedError


def test_token_list_engine_cuts_each_completion_at_its_cap(tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
    config = default_section(RolloutConfig, response_length=LENGTH, calculate_log_probs=True)
    engine = EightTokens(str(tiny_model_dir), tiny_tokenizer, config, dtype="float32")
    out = engine.generate(with_caps(make_prompt_batch(tiny_tokenizer), [1, None, 3, 20, 5, 8]))
    assert engine.asked == [1, 10, 3, 10, 5, 8], "the caps are not the requests' max_tokens"
    assert out["response_mask"].sum(dim=1).tolist() == [1, 8, 3, 8, 5, 8]
    assert out["responses"][2, :4].tolist() == [1, 2, 3, engine.pad_token_id]
    assert out["rollout_log_probs"].sum(dim=1).tolist() == [-1.0, -8.0, -3.0, -8.0, -5.0, -8.0]


@pytest.mark.parametrize("budget", [2, 5])
def test_partial_rollout_finishes_each_row_at_its_cap_as_generate_does(
    tiny_model_dir: Path, tiny_tokenizer: Any, budget: int
) -> None:
    """Chunks of ``budget`` tokens (``generate_partial``) stop each row at its cap, mark it finished there and
    sample the tokens of one capped ``generate`` call."""
    caps = [1, 3, 6, 2, 5, 4]
    whole = hf_engine(tiny_model_dir, tiny_tokenizer).generate(with_caps(make_prompt_batch(tiny_tokenizer), caps))
    engine = hf_engine(tiny_model_dir, tiny_tokenizer)
    out = engine.generate_partial(with_caps(make_prompt_batch(tiny_tokenizer), caps), budget)
    for _ in range(max(caps)):
        if bool(out["finished"].all()):
            break
        out = engine.generate_partial(out, budget)
    assert bool(out["finished"].all())
    assert out["response_mask"].sum(dim=1).tolist() == caps
    assert torch.equal(out["responses"], whole["responses"])
    # each chunk decodes up to the largest cap still open: the model runs once per token of the longest row
    assert engine.calls == max(caps)  # type: ignore[attr-defined]
