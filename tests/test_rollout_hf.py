"""Tests for :mod:`rlcore_plugin_hf.engine`: the built-in KV-cache sampler, its weight sync and config checks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_plugin_hf.engine import HFRolloutEngine
from rlcore_plugin_hf.sampler import sample_next_tokens
from rlcore_testkit.contracts.rollout import RolloutEngineContract, make_prompt_batch

from rlcore.api import RolloutConfig, default_section
from rlcore.api.batch import Batch
from rlcore.errors import RLCoreError
from rlcore.rollout.sampling import SamplingParams, request_seeds
from rlcore.rollout.weights import state_checksum

pytestmark = pytest.mark.usefixtures("single_intra_op_thread")


class TestHFRolloutContract(RolloutEngineContract):
    """The rollout-engine contract for the built-in ``hf`` engine."""

    component_name = "hf"


def rollout_config(**overrides: Any) -> Any:
    """The typed ``actor_rollout_ref.rollout`` section of the defaults, 10 response tokens, with ``overrides``."""
    return default_section(RolloutConfig, **{"response_length": 10, **overrides})


@pytest.fixture
def make_engine(tiny_model_dir: Path, tiny_tokenizer: Any) -> Callable[..., HFRolloutEngine]:
    """``make_engine(**config_overrides)`` builds an HF engine on the tiny model."""

    def factory(**overrides: Any) -> HFRolloutEngine:
        return HFRolloutEngine(str(tiny_model_dir), tiny_tokenizer, rollout_config(**overrides))

    return factory


def force_eos(engine: HFRolloutEngine, stop_at: list[int | None]) -> list[int]:
    """Make row ``i`` emit EOS as its ``stop_at[i]``-th response token (never for None).

    Returns a one-element list counting the model's forward calls (prefill included).
    """
    calls = [0]
    eos = engine.eos_token_ids[0]

    def hook(_module: torch.nn.Module, _args: Any, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.clone()
        for row, step in enumerate(stop_at):
            if step is not None and calls[0] >= step:
                logits[row, -1, eos] = 1e4
        calls[0] += 1
        return logits

    engine.module.get_output_embeddings().register_forward_hook(hook)
    return calls


def test_top_k_one_equals_greedy(make_engine: Callable[..., HFRolloutEngine], tiny_tokenizer: Any) -> None:
    """Sampling restricted to the single most likely token reproduces greedy decoding."""
    batch = make_prompt_batch(tiny_tokenizer)
    greedy = make_engine().generate(batch, validate=True)
    top_k = make_engine(top_k=1, temperature=1.3).generate(batch)
    assert torch.equal(greedy["responses"], top_k["responses"])


def test_tiny_top_p_equals_greedy(make_engine: Callable[..., HFRolloutEngine], tiny_tokenizer: Any) -> None:
    """A nucleus smaller than the top token's probability keeps only that token."""
    batch = make_prompt_batch(tiny_tokenizer)
    greedy = make_engine().generate(batch, validate=True)
    nucleus = make_engine(top_p=1e-6).generate(batch)
    assert torch.equal(greedy["responses"], nucleus["responses"])


def test_sampling_follows_top_k_and_top_p() -> None:
    """Filtered tokens are never drawn; the kept ones are drawn in proportion to their probability."""
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(20000, 1)
    generator = torch.Generator().manual_seed(0)
    tokens, _ = sample_next_tokens(logits, SamplingParams(top_k=2), generator)
    counts = torch.bincount(tokens, minlength=4).float() / len(tokens)
    assert counts[2:].sum() == 0
    assert abs(counts[0] - 0.5 / 0.8) < 0.02
    tokens, _ = sample_next_tokens(logits, SamplingParams(top_p=0.85), generator)
    counts = torch.bincount(tokens, minlength=4).float() / len(tokens)
    assert counts[3] == 0 and counts[2] > 0
    assert abs(counts[0] - 0.5 / 0.95) < 0.02


def test_forced_eos_stops_early_and_masks(make_engine: Callable[..., HFRolloutEngine], tiny_tokenizer: Any) -> None:
    """Rows stop at their EOS, are padded after it, and the loop ends when every row has stopped."""
    engine = make_engine(calculate_log_probs=True)
    stop_at = [0, 3, 1, 5, 2, 3]
    calls = force_eos(engine, stop_at)
    out = engine.generate(make_prompt_batch(tiny_tokenizer))
    eos, pad = engine.eos_token_ids[0], tiny_tokenizer.pad_token_id
    assert calls[0] == max(stop_at) + 1, "the loop kept decoding after every row emitted EOS"
    assert out["responses"].shape[1] == engine.settings.response_length
    for row, step in enumerate(stop_at):
        responses, mask = out["responses"][row].tolist(), out["response_mask"][row].tolist()
        assert responses[step] == eos and eos not in responses[:step]
        assert responses[step + 1 :] == [pad] * (engine.settings.response_length - step - 1)
        assert mask == [1] * (step + 1) + [0] * (engine.settings.response_length - step - 1)
        assert out["rollout_log_probs"][row, step + 1 :].abs().sum() == 0
    prompt_len = out["prompts"].shape[1]
    assert torch.equal(out["attention_mask"][:, prompt_len:], out["response_mask"])
    assert out.meta["metrics"]["rollout/gen_tokens"] == sum(step + 1 for step in stop_at)


def test_ignore_eos_fills_the_response(make_engine: Callable[..., HFRolloutEngine], tiny_tokenizer: Any) -> None:
    """With ``ignore_eos`` every row is sampled to the full response length."""
    engine = make_engine(ignore_eos=True)
    force_eos(engine, [0] * 6)
    out = engine.generate(make_prompt_batch(tiny_tokenizer))
    assert bool((out["response_mask"] == 1).all())
    assert bool((out["responses"] == engine.eos_token_ids[0]).all())


@pytest.mark.parametrize(("validate", "overrides"), [(False, {"temperature": 0.7, "top_p": 0.9}), (True, {})])
def test_rollout_log_probs_match_teacher_forcing(
    make_engine: Callable[..., HFRolloutEngine], tiny_tokenizer: Any, validate: bool, overrides: dict[str, Any]
) -> None:
    """``rollout_log_probs`` equal a full forward over the output sequence at the sampling temperature."""
    engine = make_engine(calculate_log_probs=True, **overrides)
    out = engine.generate(make_prompt_batch(tiny_tokenizer), validate=validate)
    temperature = overrides.get("temperature", 1.0)
    with torch.no_grad():
        logits = engine.module(
            input_ids=out["input_ids"], attention_mask=out["attention_mask"], position_ids=out["position_ids"]
        ).logits
    prompt_len = out["prompts"].shape[1]
    step_logits = logits[:, prompt_len - 1 : -1].float() / temperature
    expected = torch.log_softmax(step_logits, -1).gather(-1, out["responses"][..., None]).squeeze(-1)
    expected = expected * out["response_mask"]
    torch.testing.assert_close(out["rollout_log_probs"], expected, atol=1e-5, rtol=0)


def test_output_dtypes_and_empty_batch(make_engine: Callable[..., HFRolloutEngine], tiny_tokenizer: Any) -> None:
    """Masks keep the prompt mask's dtype; an empty batch returns empty tensors of the right width."""
    engine = make_engine()
    out = engine.generate(make_prompt_batch(tiny_tokenizer))
    assert out["responses"].dtype == torch.long
    assert out["response_mask"].dtype == out["attention_mask"].dtype == torch.long
    empty = make_prompt_batch(tiny_tokenizer)[[]]
    result = engine.generate(empty)
    assert len(result) == 0 and result["responses"].shape == (0, engine.settings.response_length)


def test_right_padded_prompts_are_rejected(make_engine: Callable[..., HFRolloutEngine]) -> None:
    """Right padding would decode from a pad position: it is an error naming the cause."""
    batch = Batch.from_dict({"input_ids": torch.tensor([[5, 6, 3]]), "attention_mask": torch.tensor([[1, 1, 0]])})
    with pytest.raises(RLCoreError, match="left-padded"):
        make_engine().generate(batch)


def test_update_weights_with_or_without_tied_alias(
    make_engine: Callable[..., HFRolloutEngine], tiny_model_dir: Path
) -> None:
    """The tied ``lm_head.weight`` may be sent or left out; the checksum tracks the new weights."""
    from transformers import AutoModelForCausalLM

    engine = make_engine()
    trainer = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():
        for param in trainer.parameters():
            param.mul_(1.5)
    engine.update_weights(trainer.named_parameters())
    assert "lm_head.weight" not in dict(trainer.named_parameters())
    assert engine.weight_checksum() == state_checksum(trainer.state_dict().items())
    copies = [(name, tensor.clone()) for name, tensor in trainer.state_dict().items()]
    assert engine.weight_checksum() == state_checksum(copies, skip=engine.uncounted_names)
    engine.update_weights(copies)
    assert engine.weight_version == 2
    assert engine.module.get_output_embeddings().weight is engine.module.get_input_embeddings().weight


def test_update_weights_errors_name_the_parameters(
    make_engine: Callable[..., HFRolloutEngine], tiny_model_dir: Path
) -> None:
    """Unknown names, shape mismatches and missing parameters raise and leave the version unchanged."""
    engine = make_engine()
    state = dict(engine.module.state_dict())
    with pytest.raises(RLCoreError, match=r"unknown parameter names: model\.not_a_layer\.weight"):
        engine.update_weights([*state.items(), ("model.not_a_layer.weight", torch.zeros(3))])
    with pytest.raises(RLCoreError, match=r"shape mismatches: model\.norm\.weight"):
        engine.update_weights([*state.items(), ("model.norm.weight", torch.zeros(3))])
    partial = {k: v for k, v in state.items() if k != "model.norm.weight"}
    with pytest.raises(RLCoreError, match=r"parameters not given: model\.norm\.weight"):
        engine.update_weights(partial.items())
    assert engine.weight_version == 0
    engine.update_weights(partial.items(), strict=False)
    assert engine.weight_version == 1


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"response_length": 0}, "actor_rollout_ref.rollout.response_length"),
        ({"top_p": 0.0}, "actor_rollout_ref.rollout.top_p"),
        ({"top_p": 1.5}, "actor_rollout_ref.rollout.top_p"),
        ({"temperature": -0.1}, "actor_rollout_ref.rollout.temperature"),
        ({"top_k": 2.5}, "actor_rollout_ref.rollout.top_k"),
        ({"val_kwargs": {"temperature": -1.0}}, "actor_rollout_ref.rollout.val_kwargs.temperature"),
    ],
)
def test_config_validation_names_the_key(
    make_engine: Callable[..., HFRolloutEngine], overrides: dict[str, Any], key: str
) -> None:
    """Invalid sampling settings raise an RLCoreError naming the full config key."""
    with pytest.raises(RLCoreError, match=key.replace(".", r"\.")):
        make_engine(**overrides)


def test_given_module_and_dtype_name(tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
    """A ready module can be handed over; ``dtype`` may be given by name and is applied to it."""
    from transformers import AutoModelForCausalLM

    module = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    engine = HFRolloutEngine(None, tiny_tokenizer, rollout_config(), dtype="bfloat16", module=module)
    assert engine.module is module and module.dtype == torch.bfloat16
    out = engine.generate(make_prompt_batch(tiny_tokenizer))
    assert isinstance(out, Batch) and out["responses"].shape[1] == 10
    with pytest.raises(RLCoreError, match="dtype"):
        HFRolloutEngine(None, tiny_tokenizer, rollout_config(), dtype="float13", module=module)


def test_state_dict_restores_the_sampling_state(
    make_engine: Callable[..., HFRolloutEngine], tiny_tokenizer: Any
) -> None:
    """A fresh engine that loads another's ``state_dict()`` samples what that engine samples next and takes
    the saved weight version; a state without its keys is refused."""
    engine = make_engine()
    engine.generate(make_prompt_batch(tiny_tokenizer))
    state = engine.state_dict()
    expected = engine.generate(make_prompt_batch(tiny_tokenizer))["responses"]
    fresh = make_engine()
    fresh.load_state_dict({**state, "weight_version": 7})
    assert fresh.weight_version == 7
    assert torch.equal(fresh.generate(make_prompt_batch(tiny_tokenizer))["responses"], expected)
    with pytest.raises(RLCoreError, match="missing weight_version"):
        fresh.load_state_dict({"calls": state["calls"]})


def test_request_seeds_distinct_and_reproducible() -> None:
    """Seeds differ across rows and calls and engine seeds, and are the same when recomputed."""
    first = request_seeds(0, 0, 64)
    assert first == request_seeds(0, 0, 64)
    assert len(set(first)) == 64
    assert set(first).isdisjoint(request_seeds(0, 1, 64))
    assert set(first).isdisjoint(request_seeds(1, 0, 64))
    assert all(0 <= seed < 2**63 for seed in first)


@pytest.mark.parametrize("overrides", [{}, {"temperature": 0.7, "top_k": 20, "calculate_log_probs": True}])
def test_static_decoder_matches_the_module_forward(
    make_engine: Callable[..., HFRolloutEngine], tiny_tokenizer: Any, overrides: dict[str, Any]
) -> None:
    """On CPU the tiny Qwen2 decodes through the static decoder; the module's own forward (the path every
    other model takes) samples the same tokens with the same log-probs from the same seed."""
    static = make_engine(**overrides)
    assert static._static is not None
    module_path = make_engine(**overrides)
    module_path._static = None
    batch = make_prompt_batch(tiny_tokenizer)
    for validate in (False, True):
        first, second = static.generate(batch, validate=validate), module_path.generate(batch, validate=validate)
        assert torch.equal(first["responses"], second["responses"])
        if "rollout_log_probs" in first:
            torch.testing.assert_close(first["rollout_log_probs"], second["rollout_log_probs"], atol=1e-5, rtol=0)


def test_engine_dtype_accepts_names_and_aliases_and_names_the_key() -> None:
    """Engines take a dtype, its torch name or the config's short alias; anything else names the key."""
    from rlcore.rollout.outputs import engine_dtype

    assert engine_dtype(torch.float16) is torch.float16
    assert engine_dtype("float32") is torch.float32 and engine_dtype("bf16") is torch.bfloat16
    with pytest.raises(RLCoreError, match="actor_rollout_ref.rollout.dtype='float17' is not a dtype"):
        engine_dtype("float17")
