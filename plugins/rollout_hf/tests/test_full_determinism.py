"""``rollout.full_determinism`` on the hf engine: a row's tokens depend on its prompt and seed only, not on the
rows beside it (each row is decoded in a chunk of its own), and a rerun gives the same tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.contracts.rollout import PROMPTS, make_prompt_batch

from rlcore.config import load_config
from rlcore.config.sections.rollout import RolloutConfig

#: other rows for the first prompt: longer ones, so the batch's padding differs too
OTHERS = ["a much longer prompt about apples oranges and pears that pads the first one", "x", "the cost of 7 pears"]


def _engine(tiny_model_dir: Path, tokenizer: Any, **overrides: Any) -> Any:
    from rlcore_plugin_hf.engine import HFRolloutEngine
    from transformers import AutoModelForCausalLM

    values = {"response_length": 12, "temperature": 1.0, "seed": 5, **overrides}
    dotted = [
        f"actor_rollout_ref.rollout.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in values.items()
    ]
    config = RolloutConfig.from_tree(load_config(overrides=dotted))
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    return HFRolloutEngine(None, tokenizer, config, module=model)


def test_rows_are_batch_invariant_and_reruns_repeat(tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
    """The first prompt's response is the same beside any other rows; every chunk is one row; a rerun from the
    same seed gives the same batch."""
    engine = _engine(tiny_model_dir, tiny_tokenizer, full_determinism=True)
    full = engine.generate(make_prompt_batch(tiny_tokenizer, PROMPTS))
    assert full.meta["metrics"]["rollout/rows_per_chunk"] == 1
    engine.load_state_dict({"calls": 0, "weight_version": 0})
    mixed = engine.generate(make_prompt_batch(tiny_tokenizer, [PROMPTS[0], *OTHERS]))
    assert torch.equal(mixed["responses"][0], full["responses"][0])
    engine.load_state_dict({"calls": 0, "weight_version": 0})
    assert torch.equal(engine.generate(make_prompt_batch(tiny_tokenizer, PROMPTS))["responses"], full["responses"])


@pytest.mark.parametrize("determinism", [False, True])
def test_the_key_only_changes_the_chunking(tiny_model_dir: Path, tiny_tokenizer: Any, determinism: bool) -> None:
    """Off, the rows share chunks (as many as the token budget holds); on, each row has a chunk of its own."""
    engine = _engine(tiny_model_dir, tiny_tokenizer, full_determinism=determinism)
    out = engine.generate(make_prompt_batch(tiny_tokenizer, PROMPTS))
    assert out.meta["metrics"]["rollout/rows_per_chunk"] == (1 if determinism else len(PROMPTS))
