"""Packed attention (:mod:`rlcore.modelkit.packed_attention`): a packed row attends within each sequence with a
causal kernel and no ``T × T`` mask, and gives the padded forward's log-probs, entropies and gradients."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from rlcore_testkit.attention import AttentionProbe
from rlcore_testkit.contracts.backend import make_batch
from rlcore_testkit.tiny import build_model
from torch import nn

from rlcore.api.batch import Batch
from rlcore.modelkit.hf_models import response_outputs
from rlcore.modelkit.packed_attention import (
    ATTENTION_NAME,
    BUCKET_RATIO,
    attend,
    kernel,
    packed_sequences,
    use_packed_attention,
)
from rlcore.modelkit.packing import pack_batch

LENGTHS = (5, 17, 0, 33, 31, 8, 1, 40, 12)
PROMPTS = (
    "what is 3 + 4",
    "john has 5 apples and mary has more apples than john has",
    "cost",
    "how many oranges are left",
    "a",
    "the total of the apples and the oranges",
)


def _alone(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, lengths: tuple[int, ...], window: int | None
) -> torch.Tensor:
    """``[1, T, H, D]``: each sequence attending to itself alone, with an explicit causal (banded) mask."""
    groups = query.shape[1] // key.shape[1]
    outputs, start = [], 0
    for length in lengths:
        stop = start + length
        q, k, v = query[:, :, start:stop], key[:, :, start:stop], value[:, :, start:stop]
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        index = torch.arange(length)
        allowed = index[None, :] <= index[:, None]
        if window is not None:
            allowed &= index[None, :] > index[:, None] - window
        outputs.append(nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed).transpose(1, 2))
        start = stop
    return torch.cat(outputs, dim=1)


@pytest.mark.parametrize("window", [None, 6])
def test_attend_equals_each_sequence_alone(window: int | None) -> None:
    """Outputs and the gradients of query, key and value equal each sequence attended alone (grouped-query heads,
    an empty and a one-token sequence); without a window every kernel call is causal and unmasked."""
    generator = torch.Generator().manual_seed(0)
    total = sum(LENGTHS)
    query, key, value = (torch.randn(1, heads, total, 16, generator=generator).requires_grad_() for heads in (4, 2, 2))
    sequences = packed_sequences(LENGTHS, torch.device("cpu"))
    with AttentionProbe() as probe:
        out = attend(query, key, value, sequences, sliding_window=window)
    expected = _alone(query, key, value, LENGTHS, window)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    grad = torch.randn(out.shape, generator=generator)
    got = torch.autograd.grad(out, (query, key, value), grad)
    want = torch.autograd.grad(expected, (query, key, value), grad)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert len(probe.calls) == len(sequences.widths)
    assert all(call.causal and not call.masked for call in probe.calls) == (window is None)
    assert not probe.squares(total)


def test_buckets_hold_sequences_of_similar_length() -> None:
    """Longest first; every member at least 3/4 of its bucket's width; each real token has one slot; the
    cumulative lengths are the varlen kernel's."""
    sequences = packed_sequences(LENGTHS, torch.device("cpu"))
    assert sequences.widths == (40, 17, 12, 8, 5, 1)
    assert sequences.cu_seqlens.tolist() == [0, 5, 22, 22, 55, 86, 94, 95, 135, 147]
    slots = sum(index.numel() for index in sequences.gather)
    assert sorted(set(sequences.scatter.tolist())) == sorted(sequences.scatter.tolist())
    assert int(sequences.scatter.max()) < slots
    for index, width in zip(sequences.gather, sequences.widths, strict=True):
        rows = index.view(-1, width)
        lengths = [int(row.unique().numel()) for row in rows]
        assert max(lengths) == width and min(lengths) >= BUCKET_RATIO * width


def test_kernel_on_cpu_is_bucketed_sdpa() -> None:
    """Off CUDA every dtype runs the bucketed causal SDPA."""
    for dtype in (torch.float32, torch.bfloat16):
        assert kernel(torch.zeros(1, 2, 8, 16, dtype=dtype)) == "sdpa"


@pytest.fixture(scope="module")
def ragged(tiny_tokenizer: Any) -> Batch:
    """Six rows: prompts of different lengths (left padding), responses of 8, 7 and 6 tokens (right padding)."""
    return make_batch(tiny_tokenizer, prompts=PROMPTS, response_length=8, seed=5)


def _model(tokenizer: Any, **config: Any) -> nn.Module:
    """A float32 tiny Qwen2 (4 query heads, 2 key/value heads) attending with ``sdpa``, in training mode;
    ``config`` changes its Qwen2 config before the layers are built."""
    from transformers import Qwen2ForCausalLM

    model = build_model(tokenizer, num_heads=4, num_kv_heads=2, seed=3)
    if config:
        changed = model.config.to_dict() | config
        torch.manual_seed(3)
        model = Qwen2ForCausalLM(type(model.config)(**changed))
    model.set_attn_implementation("sdpa")
    return model.train()


def _outputs_and_grads(model: nn.Module, batch: Batch, packed: bool) -> tuple[torch.Tensor, torch.Tensor, list]:
    """Log-probs and entropies (0 outside the response mask) and the gradient of a PPO-like loss."""
    model.zero_grad(set_to_none=True)
    out = response_outputs(model, batch, 0.7, with_entropy=True, remove_padding=packed)
    mask = batch["response_mask"].float()
    advantages = torch.linspace(-1, 1, mask.numel()).view_as(mask)
    loss = -(advantages * out.log_probs * mask).sum() / mask.sum() - 0.01 * (out.entropy * mask).sum() / mask.sum()
    loss.backward()
    assert out.entropy is not None
    grads = [p.grad.detach().clone() for p in model.parameters()]
    return out.log_probs.detach() * mask, out.entropy.detach() * mask, grads


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointed"])
def test_packed_forward_and_backward_equal_padded(tiny_tokenizer: Any, ragged: Batch, checkpointing: bool) -> None:
    """float32: packed log-probs, entropies and every parameter's gradient equal the padded forward's to 1e-5;
    the packed forward and backward (with activation checkpointing: its recomputation too) never create a
    ``nnz × nnz`` tensor, and every attention call of the forward is causal without a mask, one per bucket
    and layer."""
    model = _model(tiny_tokenizer)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    padded = _outputs_and_grads(model, ragged, packed=False)
    with AttentionProbe() as probe:
        packed = _outputs_and_grads(model, ragged, packed=True)
    nnz = int(ragged["attention_mask"].sum())
    assert not probe.squares(nnz)
    assert model.config._attn_implementation == ATTENTION_NAME
    torch.testing.assert_close(packed[0], padded[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(packed[1], padded[1], atol=1e-5, rtol=1e-5)
    for got, want in zip(packed[2], padded[2], strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    buckets = len(packed_sequences(pack_batch(ragged, "key").lengths, torch.device("cpu")).widths)
    layers = model.config.num_hidden_layers
    assert len(probe.calls) == buckets * layers
    assert all(call.causal and not call.masked for call in probe.calls)
    assert sum(call.query[0] for call in probe.calls[:buckets]) == len(ragged)


def test_sliding_window_layers_attend_within_their_window(tiny_tokenizer: Any, ragged: Batch) -> None:
    """A model whose second layer slides a 4-token window: packed equals padded, still without a ``nnz × nnz``
    tensor (the window is a band mask per bucket)."""
    model = _model(tiny_tokenizer, use_sliding_window=True, sliding_window=4, max_window_layers=1, layer_types=None)
    assert model.config.layer_types == ["full_attention", "sliding_attention"]
    padded = _outputs_and_grads(model, ragged, packed=False)
    with AttentionProbe() as probe:
        packed = _outputs_and_grads(model, ragged, packed=True)
    for got, want in zip((packed[0], packed[1], *packed[2]), (padded[0], padded[1], *padded[2]), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert not probe.squares(int(ragged["attention_mask"].sum()))
    assert any(call.masked for call in probe.calls) and any(call.causal for call in probe.calls)


def test_a_switched_model_runs_other_inputs_as_sdpa(tiny_tokenizer: Any, ragged: Batch) -> None:
    """After the switch a padded batch gives exactly what ``sdpa`` gave (mask included)."""
    model = _model(tiny_tokenizer).eval()
    with torch.no_grad():
        before = model(input_ids=ragged["input_ids"], attention_mask=ragged["attention_mask"]).logits
        assert use_packed_attention(model) == ATTENTION_NAME
        after = model(input_ids=ragged["input_ids"], attention_mask=ragged["attention_mask"]).logits
    assert torch.equal(before, after)


def test_eager_keeps_transformers_path(tiny_tokenizer: Any, ragged: Batch) -> None:
    """A model configured with ``eager`` is not switched: transformers' dense block-diagonal mask, same numbers."""
    model = _model(tiny_tokenizer)
    model.set_attn_implementation("eager")
    padded = _outputs_and_grads(model, ragged, packed=False)
    packed = _outputs_and_grads(model, ragged, packed=True)
    assert model.config._attn_implementation == "eager"
    torch.testing.assert_close(packed[0], padded[0], atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the varlen kernel needs CUDA")
def test_varlen_kernel_on_cuda_matches_bucketed_sdpa() -> None:
    """bfloat16 on a flash-capable GPU: the varlen kernel runs and agrees with the bucketed SDPA (and its
    gradients), both against float32 each-sequence-alone attention."""
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("flash attention needs compute capability 8.0")
    generator = torch.Generator().manual_seed(0)
    total = sum(LENGTHS)
    tensors = [torch.randn(1, heads, total, 64, generator=generator) for heads in (8, 2, 2)]
    query, key, value = (t.cuda().bfloat16().requires_grad_() for t in tensors)
    assert kernel(query) == "varlen"
    sequences = packed_sequences(LENGTHS, query.device)
    out = attend(query, key, value, sequences)
    expected = _alone(*(t.cuda() for t in tensors), LENGTHS, None)
    torch.testing.assert_close(out.float(), expected, atol=2e-2, rtol=2e-2)
    out.float().square().sum().backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in (query, key, value))
