"""``rollout.full_determinism`` on vLLM (CPU here): one request at a time without prefix caching, so a row's
tokens depend on its prompt and seed only; a rerun from the same seed gives the same tokens. (vLLM's own
batch-invariant mode, ``VLLM_BATCH_INVARIANT``, replaces CUDA/XPU kernels with Triton ones: set on CUDA only.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from rlcore_testkit.contracts.rollout import PROMPTS, make_prompt_batch

#: other rows for the first prompt: longer ones, so the batch's padding and its scheduling differ too
OTHERS = ["a much longer prompt about apples oranges and pears that pads the first one", "x", "the cost of 7 pears"]


def test_rows_are_batch_invariant_and_reruns_repeat(make_engine: Callable[..., Any], tiny_tokenizer: Any) -> None:
    """The engine runs one sequence at a time; the first prompt's response is the same beside other rows, and a
    rerun from the same seed gives the same batch."""
    engine = make_engine(full_determinism=True, temperature=1.0, seed=5)
    scheduler = engine.llm.llm_engine.vllm_config.scheduler_config
    assert scheduler.max_num_seqs == 1
    assert not engine.llm.llm_engine.vllm_config.cache_config.enable_prefix_caching
    full = engine.generate(make_prompt_batch(tiny_tokenizer, PROMPTS))
    engine.load_state_dict({"calls": 0, "weight_version": 0})
    mixed = engine.generate(make_prompt_batch(tiny_tokenizer, [PROMPTS[0], *OTHERS]))
    assert torch.equal(mixed["responses"][0], full["responses"][0])
    engine.load_state_dict({"calls": 0, "weight_version": 0})
    assert torch.equal(engine.generate(make_prompt_batch(tiny_tokenizer, PROMPTS))["responses"], full["responses"])
