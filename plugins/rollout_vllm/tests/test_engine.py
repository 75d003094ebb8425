"""The vLLM engine beyond the contract: weight-update errors, dummy start-up, CPU sleep/wake, resumable seeds,
vLLM's statistics, and partial rollout (``TokenListEngine.generate_partial``): a first chunk samples the start of
what ``generate`` samples (the row seed is the request seed), and continued requests stay within the response
length and ``max_model_len``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.contracts.rollout import PROMPTS, make_prompt_batch, teacher_forced_log_probs

from rlcore.errors import RLCoreError

#: the engine settings of every test here but the dummy start's: one started engine (from the pool) serves them all
SAMPLING = {"calculate_log_probs": True, "temperature": 0.7}
#: the dummy start's settings, also those of the engine that keeps vLLM's statistics (they do not touch the weights):
#: a second started engine serves both tests
DUMMY_WITH_STATS = {"load_format": "dummy", "disable_log_stats": False}


@pytest.fixture(scope="module")
def hf_model(tiny_model_dir: Path) -> Any:
    """The tiny model in float32, as the trainer holds it."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)


def test_bad_weight_updates_name_the_problem_and_send_nothing(make_engine: Callable[..., Any], hf_model: Any) -> None:
    """Unknown names, wrong shapes and missing parameters are refused before anything reaches vLLM."""
    engine = make_engine(**SAMPLING)
    state = dict(hf_model.state_dict())
    with pytest.raises(RLCoreError, match="unknown parameter names: model.extra.weight"):
        engine.update_weights([*state.items(), ("model.extra.weight", torch.zeros(2))])
    bad_shape = {**state, "model.norm.weight": torch.ones(3)}
    with pytest.raises(RLCoreError, match=r"shape mismatches: model.norm.weight \(engine \(64,\), given \(3,\)\)"):
        engine.update_weights(bad_shape.items())
    partial = {name: tensor for name, tensor in state.items() if name != "model.norm.weight"}
    with pytest.raises(RLCoreError, match="parameters not given: model.norm.weight"):
        engine.update_weights(partial.items())
    assert engine.weight_version == 0


def test_dummy_start_then_first_sync_serves_the_trainer(
    make_engine: Callable[..., Any], hf_model: Any, tiny_tokenizer: Any
) -> None:
    """``load_format=dummy`` (verl's default) starts on random weights; the first sync makes the engine
    serve the trainer's model, tied output head included (sent without its alias)."""
    engine = make_engine(**DUMMY_WITH_STATS)
    ids = tiny_tokenizer(PROMPTS[0])["input_ids"]
    expected = teacher_forced_log_probs(hf_model, ids)
    assert (engine.prompt_log_probs(ids) - expected).abs().max() > 1e-2
    untied_names = {name: t for name, t in hf_model.state_dict().items() if name not in engine.uncounted_names}
    engine.update_weights(untied_names.items())
    torch.testing.assert_close(engine.prompt_log_probs(ids), expected, atol=1e-4, rtol=0)


def test_sleep_and_wake_are_skipped_on_cpu(make_engine: Callable[..., Any], tiny_tokenizer: Any) -> None:
    """On CPU there is no accelerator memory to release: ``sleep()`` leaves the engine serving."""
    engine = make_engine(**SAMPLING)
    engine.sleep()
    assert not engine.is_sleeping
    assert len(engine.generate(make_prompt_batch(tiny_tokenizer))) == len(PROMPTS)
    engine.wake()
    assert not engine.is_sleeping


def test_resumed_engine_continues_the_random_stream(make_engine: Callable[..., Any], tiny_tokenizer: Any) -> None:
    """Restoring ``state_dict()`` makes the next generate call draw what the uninterrupted engine drew."""
    engine = make_engine(**SAMPLING)
    batch = make_prompt_batch(tiny_tokenizer)
    engine.generate(batch)
    state = engine.state_dict()
    second = engine.generate(batch)["responses"]
    engine.load_state_dict(state)
    assert torch.equal(engine.generate(batch)["responses"], second)
    with pytest.raises(RLCoreError, match="missing calls"):
        engine.load_state_dict({"weight_version": 0})


def test_rollout_log_probs_match_the_trainer(
    make_engine: Callable[..., Any], hf_model: Any, tiny_tokenizer: Any
) -> None:
    """The engine's ``rollout_log_probs`` at temperature 0.7 equal the trainer's log-probs of the sampled
    tokens at that temperature (no train/inference mismatch in float32)."""
    engine = make_engine(**SAMPLING)
    out = engine.generate(make_prompt_batch(tiny_tokenizer))
    length = out["responses"].shape[1]
    with torch.no_grad():
        logits = (
            hf_model(input_ids=out["input_ids"], attention_mask=out["attention_mask"], position_ids=out["position_ids"])
            .logits[:, -length - 1 : -1]
            .float()
            / 0.7
        )
    trainer = torch.log_softmax(logits, dim=-1).gather(-1, out["responses"][..., None]).squeeze(-1)
    valid = out["response_mask"].bool()
    torch.testing.assert_close(out["rollout_log_probs"][valid], trainer[valid], atol=1e-4, rtol=0)


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


def test_a_module_or_missing_path_is_refused(rollout_section: Callable[..., Any], tiny_tokenizer: Any) -> None:
    """The engine loads its model from a path; a module or no path is a clear error (before vLLM starts)."""
    from rlcore_plugin_vllm.engine import VLLMRolloutEngine

    with pytest.raises(RLCoreError, match="cannot wrap a module"):
        VLLMRolloutEngine("model", tiny_tokenizer, rollout_section(), module=torch.nn.Linear(2, 2))
    with pytest.raises(RLCoreError, match="needs actor_rollout_ref.model.path"):
        VLLMRolloutEngine(None, tiny_tokenizer, rollout_section())


def test_disable_log_stats_reaches_vllm(make_engine: Callable[..., Any], tiny_tokenizer: Any) -> None:
    """``rollout.disable_log_stats`` (verl's key, true by default) is vLLM's own: false makes the engine keep its
    statistics, and it still generates."""
    assert make_engine(**SAMPLING).llm.llm_engine.log_stats is False
    engine = make_engine(**SAMPLING, **DUMMY_WITH_STATS)
    assert engine.llm.llm_engine.log_stats is True
    out = engine.generate(make_prompt_batch(tiny_tokenizer))
    assert out["responses"].shape[1] == 8


def test_an_engine_argument_vllm_does_not_take_is_named_before_it_starts(vllm: Any) -> None:
    """``vllm.engine_kwargs`` is passed through to ``vllm.LLM``: a key that neither it nor ``vllm.EngineArgs`` takes
    (``swap_space`` is gone from vLLM's engine arguments) is an error naming the config key; the others pass."""
    from rlcore_plugin_vllm.engine import check_engine_kwargs

    check_engine_kwargs(vllm, {"mm_processor_cache_gb": 0, "compilation_config": {"cudagraph_mode": "NONE"}})
    with pytest.raises(
        RLCoreError, match=r"actor_rollout_ref\.rollout\.vllm\.engine_kwargs\.swap_space: not an argument"
    ):
        check_engine_kwargs(vllm, {"swap_space": 4, "max_model_len": 64})
