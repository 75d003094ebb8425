"""The HF engine's static decoder beyond Qwen2: Qwen3 (per-head q/k norms) decodes as the module does, the
bucketed decode (chunks padded to a batch-size bucket, static shapes: the CUDA-graph path, here without
capture) samples what the eager decode samples, and a decoding step costs the same number of operator
calls for 4 rows as for 64. On CUDA: graphs replay the bucketed steps and sample what eager steps sample."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from rlcore_plugin_hf.chunking import READ_BUCKETS
from rlcore_plugin_hf.engine import HFRolloutEngine
from rlcore_testkit.contracts.rollout import PROMPTS, make_prompt_batch
from rlcore_testkit.tiny import padded_vocab_size

from rlcore.api import RolloutConfig, default_section
from rlcore.api.batch import Batch

pytestmark = pytest.mark.usefixtures("single_intra_op_thread")

#: prompts of different lengths (left padding differs per row)
MORE_PROMPTS = [*PROMPTS, "a b c", "one more prompt here", "x", "the end is near", "numbers 4 5 6"]


def rollout_config(**overrides: Any) -> Any:
    """The default ``actor_rollout_ref.rollout`` section, 10 response tokens, with ``overrides``."""
    return default_section(RolloutConfig, **{"response_length": 10, **overrides})


def qwen3_model(tokenizer: Any, vocab_size: int | None = None, hidden_size: int = 64) -> torch.nn.Module:
    """A random tiny ``Qwen3ForCausalLM`` (4 query / 2 key-value heads) whose RMSNorm weights, the per-head
    q/k norms included, are random too (so that their order matters)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=vocab_size or padded_vocab_size(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden_size // 4,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(1 + 0.3 * torch.randn_like(param))
    return model


def engine_on(module: torch.nn.Module, tokenizer: Any, **kwargs: Any) -> HFRolloutEngine:
    """An HF engine on a copy of ``module`` (config overrides as keywords; ``bucketed`` passed through)."""
    bucketed = kwargs.pop("bucketed", None)
    device = kwargs.pop("device", "cpu")
    return HFRolloutEngine(
        None, tokenizer, rollout_config(**kwargs), module=copy.deepcopy(module), bucketed=bucketed, device=device
    )


def assert_same_samples(first: Batch, second: Batch) -> None:
    """The same tokens and masks; log-probs equal to float32 rounding."""
    assert torch.equal(first["responses"], second["responses"])
    assert torch.equal(first["response_mask"], second["response_mask"])
    if "rollout_log_probs" in first:
        torch.testing.assert_close(first["rollout_log_probs"], second["rollout_log_probs"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("overrides", [{}, {"temperature": 0.7, "top_k": 20, "calculate_log_probs": True}])
def test_qwen3_static_decoder_matches_the_module_forward(tiny_tokenizer: Any, overrides: dict[str, Any]) -> None:
    """A tiny Qwen3 decodes through the static decoder and, with it switched off, through the module's
    own forward: the same tokens and log-probs in float32, sampled and greedy."""
    model = qwen3_model(tiny_tokenizer)
    static = engine_on(model, tiny_tokenizer, **overrides)
    assert static._static is not None
    module_path = engine_on(model, tiny_tokenizer, **overrides)
    module_path._static = None
    batch = make_prompt_batch(tiny_tokenizer)
    for validate in (False, True):
        first, second = static.generate(batch, validate=validate), module_path.generate(batch, validate=validate)
        assert int(first["response_mask"].sum()) > len(batch)
        assert_same_samples(first, second)


@pytest.mark.parametrize(
    ("architecture", "overrides"),
    [
        ("qwen2", {"calculate_log_probs": True, "temperature": 0.8, "top_p": 0.9}),
        ("qwen2", {"ignore_eos": True}),
        ("qwen3", {"calculate_log_probs": True, "max_num_batched_tokens": 3 * 30}),
    ],
)
def test_bucketed_decode_samples_what_the_eager_decode_samples(
    tiny_model_dir: Any, tiny_tokenizer: Any, architecture: str, overrides: dict[str, Any]
) -> None:
    """Chunks padded to their bucket (11 rows -> 16; with a budget of 3 rows per chunk, 3 -> 4) and decoded
    with static shapes over the whole cache — the CUDA-graph path without capture — sample exactly what
    the eager decode samples, over two calls; the rows per chunk are reported."""
    from transformers import AutoModelForCausalLM

    if architecture == "qwen3":
        model = qwen3_model(tiny_tokenizer)
    else:
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    eager = engine_on(model, tiny_tokenizer, **overrides)
    bucketed = engine_on(model, tiny_tokenizer, bucketed=True, **overrides)
    assert bucketed.pads_to_buckets and not eager.pads_to_buckets
    batch = make_prompt_batch(tiny_tokenizer, MORE_PROMPTS)
    for _call in range(2):
        expected, padded = eager.generate(batch), bucketed.generate(batch)
        assert_same_samples(padded, expected)
        metrics = padded.meta["metrics"]
        assert metrics["rollout/rows_per_chunk"] == expected.meta["metrics"]["rollout/rows_per_chunk"]
        assert metrics["rollout/graph_step_share"] == 0.0  # no CUDA: nothing is captured
    budget = overrides.get("max_num_batched_tokens")
    width = batch["input_ids"].shape[1] + 10
    assert expected.meta["metrics"]["rollout/rows_per_chunk"] == (
        len(MORE_PROMPTS) if budget is None else budget // width
    )


def aten_calls_per_step(engine: HFRolloutEngine, batch: Batch, steps: int = 6) -> tuple[float, int]:
    """Operator calls (``aten::`` events of the torch profiler) per decoding step of a generate call, and
    the host reads of tensor values (``aten::_local_scalar_dense``: ``.item()``, ``bool(t)``, ...) among
    them: the profiler runs from the output head's second call (the first decoding step's logits) to its
    ``steps + 2``-th, so it sees exactly ``steps`` steps (sampling, then the next forward) and nothing of
    the prefill or of the call's set-up."""
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    calls = [0]

    def window(_module: torch.nn.Module, _args: Any, _output: torch.Tensor) -> None:
        calls[0] += 1
        if calls[0] == 2:
            profiler.start()
        elif calls[0] == steps + 2:
            profiler.stop()

    handle = engine.module.get_output_embeddings().register_forward_hook(window)
    try:
        engine.generate(batch)
    finally:
        handle.remove()
    assert calls[0] >= steps + 2, "the call decoded fewer steps than the window"
    names = [event.name for event in profiler.events() if event.name.startswith("aten::")]
    return len(names) / steps, names.count("aten::_local_scalar_dense")


@pytest.mark.parametrize("path", ["static", "bucketed", "module"])
def test_operator_calls_per_step_do_not_grow_with_the_batch(tiny_tokenizer: Any, path: str) -> None:
    """With a vocabulary larger than one noise block (every step draws its own noise), a decoding step
    makes the same number of operator calls for 4 rows as for 64: on the static decoder eagerly,
    bucketed (the CUDA-graph path), and through the module's own forward. With EOS ignored the loop
    reads no tensor value on the host (it has nothing to test)."""
    model = qwen3_model(tiny_tokenizer, vocab_size=70_016, hidden_size=32)
    per_step = {}
    for rows in (4, 64):
        batch = make_prompt_batch(tiny_tokenizer, [f"prompt {i} " + "word " * (i % 5) for i in range(rows)])
        engine = engine_on(model, tiny_tokenizer, response_length=10, ignore_eos=True, bucketed=path == "bucketed")
        if path == "module":
            engine._static = None
        engine.generate(batch)  # warm-up: lazy initialisation happens once
        per_step[rows], host_reads = aten_calls_per_step(engine, batch)
        assert host_reads == 0
    assert per_step[4] == per_step[64], per_step
    assert per_step[4] > 0


# ------------------------------------------------------------------------------------------- CUDA


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need CUDA")
@pytest.mark.parametrize("overrides", [{"calculate_log_probs": True}, {"temperature": 0.7, "top_p": 0.9}])
def test_cuda_graphs_sample_what_eager_steps_sample(tiny_tokenizer: Any, overrides: dict[str, Any]) -> None:
    """On CUDA in float32 the graph-replayed steps (chunks padded to buckets) sample the tokens the eager
    steps (``enforce_eager``) sample and the CPU samples; almost every step is replayed; the graphs are
    dropped by sleep() and captured again after wake(); an in-place weight update is served by the
    captured graphs without capturing them again."""
    model = qwen3_model(tiny_tokenizer)
    graphs = engine_on(model, tiny_tokenizer, device="cuda", response_length=24, ignore_eos=True, **overrides)
    eager = engine_on(
        model, tiny_tokenizer, device="cuda", response_length=24, ignore_eos=True, enforce_eager=True, **overrides
    )
    cpu = engine_on(model, tiny_tokenizer, response_length=24, ignore_eos=True, **overrides)
    assert graphs.pads_to_buckets and not eager.pads_to_buckets
    batch = make_prompt_batch(tiny_tokenizer, MORE_PROMPTS)
    replayed = graphs.generate(batch)
    assert graphs._graphs is not None and graphs._graphs.failure is None
    assert replayed.meta["metrics"]["rollout/graph_step_share"] > 0.9
    assert_same_samples(replayed, eager.generate(batch))
    assert_same_samples(replayed, cpu.generate(batch))
    assert 1 < len(graphs._graphs) <= READ_BUCKETS  # one graph per read-length bucket the steps reached
    graphs.sleep()
    assert len(graphs._graphs) == 0
    graphs.wake()
    with torch.no_grad():
        for param in graphs.module.parameters():
            param.mul_(1.01)
        for param in eager.module.parameters():
            param.mul_(1.01)
    first = graphs.generate(batch)
    captured = graphs._graphs._graphs.copy()
    second = graphs.generate(batch)
    assert graphs._graphs._graphs == captured, "an in-place update must not capture the graphs again"
    eager.generate(batch)
    assert_same_samples(second, eager.generate(batch))
    assert first.meta["metrics"]["rollout/graph_step_share"] > 0.9


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="memory-sized chunks need CUDA")
def test_cuda_chunks_are_sized_from_free_memory(tiny_tokenizer: Any) -> None:
    """On CUDA every row fits in one chunk of the tiny model, and a utilization that leaves no room (a
    millionth of the device: less than the CUDA context alone) is an error naming the key."""
    from rlcore.errors import RLCoreError

    model = qwen3_model(tiny_tokenizer)
    engine = engine_on(model, tiny_tokenizer, device="cuda")
    out = engine.generate(make_prompt_batch(tiny_tokenizer, MORE_PROMPTS))
    assert out.meta["metrics"]["rollout/rows_per_chunk"] == len(MORE_PROMPTS)
    starved = engine_on(model, tiny_tokenizer, device="cuda", gpu_memory_utilization=1e-6)
    with pytest.raises(RLCoreError, match="gpu_memory_utilization"):
        starved.generate(make_prompt_batch(tiny_tokenizer))
