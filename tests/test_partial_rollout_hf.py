"""Partial rollout in the HF engine (:meth:`rlcore_plugin_hf.engine.HFRolloutEngine.generate_partial`): chunked
generation is exact (token for token one ``generate`` call), and a weight update between chunks is served to
the rows still decoding with per-token versions and log-probs of the version that sampled them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_plugin_hf.engine import HFRolloutEngine
from rlcore_plugin_hf.row_noise import offset_seed, step_keys
from rlcore_testkit.contracts.rollout import (
    check_partial_log_probs,
    make_eos_prone_model_dir,
    make_prompt_batch,
    perturbed_model,
)

from rlcore.api import RolloutConfig, SupportsPartialRollout, default_section
from rlcore.errors import RLCoreError

pytestmark = pytest.mark.usefixtures("single_intra_op_thread")


def engine_on(model_dir: Path, tokenizer: Any, bucketed: bool | None = None, **overrides: Any) -> HFRolloutEngine:
    """An HF engine on ``model_dir`` with the defaults plus ``overrides`` (log-probs on)."""
    config = default_section(RolloutConfig, **{"response_length": 16, "calculate_log_probs": True, **overrides})
    return HFRolloutEngine(str(model_dir), tokenizer, config, bucketed=bucketed)


def run_chunks(engine: HFRolloutEngine, batch: Any, budget: int, validate: bool = False) -> Any:
    """``generate_partial`` with ``budget`` until every row is finished."""
    out = engine.generate_partial(batch, budget, validate=validate)
    for _ in range(64):
        if bool(out["finished"].all()):
            return out
        out = engine.generate_partial(out, budget, validate=validate)
    raise AssertionError("generate_partial did not finish")


def test_offset_seed_shifts_the_step_keys() -> None:
    """Step ``t`` of the shifted seed is step ``offset + t`` of the seed (what makes continuations exact)."""
    seed = 2**62 + 12345
    keys = step_keys(torch.tensor([seed]), 12)
    shifted = step_keys(torch.tensor([offset_seed(seed, 5)]), 7)
    assert torch.equal(keys[:, 5:], shifted)


@pytest.mark.parametrize("bucketed", [False, True])
@pytest.mark.parametrize("budget", [1, 3, 7])
def test_chunks_equal_one_generate_call(
    tiny_model_dir: Path, tiny_tokenizer: Any, tmp_path: Path, budget: int, bucketed: bool
) -> None:
    """With no weight update, chunks of ``budget`` tokens sample exactly the tokens of one ``generate`` call
    (the same row seeds, the noise continued at each row's step offset), with its log-probs."""
    eos_dir = make_eos_prone_model_dir(tiny_model_dir, tmp_path / "eos-prone")
    batch = make_prompt_batch(tiny_tokenizer)
    whole = engine_on(eos_dir, tiny_tokenizer, bucketed, temperature=0.9).generate(batch)
    chunked = run_chunks(engine_on(eos_dir, tiny_tokenizer, bucketed, temperature=0.9), batch, budget)
    assert torch.equal(chunked["responses"], whole["responses"])
    assert torch.equal(chunked["response_mask"], whole["response_mask"])
    assert torch.equal(chunked["input_ids"], whole["input_ids"])
    torch.testing.assert_close(chunked["rollout_log_probs"], whole["rollout_log_probs"], atol=1e-5, rtol=0)
    assert bool((whole["response_mask"].sum(dim=1) < 16).any()), "no row stopped at EOS: the test shows nothing"
    assert int(chunked["rollout_versions"].max()) == 0


def test_greedy_chunks_equal_greedy_generate(tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
    """Validation (greedy) chunks equal one greedy ``generate`` call and draw no seeds."""
    engine = engine_on(tiny_model_dir, tiny_tokenizer)
    batch = make_prompt_batch(tiny_tokenizer)
    chunked = run_chunks(engine, batch, 4, validate=True)
    assert torch.equal(chunked["responses"], engine.generate(batch, validate=True)["responses"])
    assert bool((chunked["row_seeds"] == -1).all()) and engine.state_dict()["calls"] == 0


def test_weight_update_mid_generation_log_probs_are_each_versions(tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
    """Two weight updates land between chunks: the trajectories span three versions and each token's
    recorded log-prob equals the temperature-scaled teacher-forced log-prob of its version (1e-5, fp32)."""
    from transformers import AutoModelForCausalLM

    engine = engine_on(tiny_model_dir, tiny_tokenizer, temperature=0.7, ignore_eos=True)
    models = {0: AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)}
    out = engine.generate_partial(make_prompt_batch(tiny_tokenizer), 6)
    for version in (1, 2):
        models[version] = perturbed_model(tiny_model_dir, seed=version)
        engine.update_weights(models[version].state_dict().items())
        out = engine.generate_partial(out, 5)
    assert bool(out["finished"].all())
    expected = torch.tensor([0] * 6 + [1] * 5 + [2] * 5).expand(len(out), -1)
    assert torch.equal(out["rollout_versions"], expected)
    check_partial_log_probs(out, models, 0.7, 1e-5)


def test_fresh_and_continued_rows_mix(tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
    """A row without a seed (``row_seeds`` -1, no tokens) starts in a batch of continued rows: it draws a
    seed, the continued rows keep theirs; ``max_new_tokens`` must be a positive integer."""
    engine = engine_on(tiny_model_dir, tiny_tokenizer)
    out = engine.generate_partial(make_prompt_batch(tiny_tokenizer), 2)
    seeds = out["row_seeds"].clone()
    out["row_seeds"][0] = -1
    out["response_mask"][0] = 0
    out["responses"][0] = tiny_tokenizer.pad_token_id
    again = engine.generate_partial(out, 2)
    assert again["response_mask"].sum(dim=1).tolist() == [2] + [4] * (len(out) - 1)
    assert torch.equal(again["row_seeds"][1:], seeds[1:]) and int(again["row_seeds"][0]) >= 0
    with pytest.raises(RLCoreError, match="max_new_tokens must be a positive integer"):
        engine.generate_partial(out, 0)
    missing = make_prompt_batch(tiny_tokenizer)
    missing["responses"] = out["responses"]
    with pytest.raises(RLCoreError, match="must hold the previous call's prompts"):
        engine.generate_partial(missing, 2)


def test_the_engine_has_the_ability(tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
    """The worker recognises the ability by the runtime-checkable protocol."""
    assert isinstance(engine_on(tiny_model_dir, tiny_tokenizer), SupportsPartialRollout)
