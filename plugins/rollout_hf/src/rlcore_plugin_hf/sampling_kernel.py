"""One read of the logits per decoding step on CUDA: a Triton kernel that draws, filters, samples and scores.

:func:`rlcore_plugin_hf.sampler.sample_next_tokens` with the rows' counter-based noise
(:mod:`rlcore_plugin_hf.row_noise`) makes about twenty passes over ``[B, V]`` float32 tensors per step in
eager torch: the noise's hash alone is a dozen integer ops, each one a kernel that reads and writes the
whole vocabulary. :func:`fused_sample` computes the same function in one kernel, one program per row,
reading each logit once: the scaling by ``1 / T`` (IEEE division, as torch on CPU), the row's uniform
``U`` by the same 32-bit hash of ``(key, v · φ32)``, the Gumbel score ``s - log(-log U)``, the top-k
threshold (the k-th largest scaled logit, from one ``torch.topk`` of the raw logits: division by ``T``
keeps the order) or a top-p drop mask (computed by torch, a sort), a running argmax (first index on ties,
as ``torch.argmax``), and a running log-sum-exp of the scaled logits for the token's log-prob (equal to
``log_softmax`` to float32 rounding, not bit for bit). Greedy decoding takes the argmax of the raw logits
with the log-prob at ``params.logprob_temperature``.

Importing this module imports triton; :mod:`rlcore_plugin_hf.decode_state` imports it only on CUDA when
triton is installed (:func:`available`). With ``TRITON_INTERPRET=1`` set before the import the kernel
runs on CPU tensors in triton's interpreter (how ``tests/test_sampling_kernel.py`` checks it).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from rlcore.api import SamplingParams
from rlcore_plugin_hf.sampler import _dropped

__all__ = ["fused_sample", "prepare"]

#: vocabulary entries a program handles per iteration
BLOCK = 2048


@triton.jit
def _sample_kernel(
    logits_ptr,
    logits_stride,
    keys_ptr,
    codes_ptr,
    kth_ptr,
    drop_ptr,
    drop_stride,
    tokens_ptr,
    logprobs_ptr,
    vocab,
    temperature,
    SCALE: tl.constexpr,
    GREEDY: tl.constexpr,
    HAS_KTH: tl.constexpr,
    HAS_DROP: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """One row: the sampled (or greedy) token and its log-prob, in one pass over the row's logits."""
    row = tl.program_id(0).to(tl.int64)
    key = tl.load(keys_ptr + row).to(tl.uint32, bitcast=True)
    kth = float("-inf")
    if HAS_KTH:
        kth = tl.load(kth_ptr + row)
    best = float("-inf")
    best_index = 0
    best_scaled = 0.0
    run_max = float("-inf")
    run_sum = 0.0
    for start in range(0, vocab, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inside = offs < vocab
        raw = tl.load(logits_ptr + row * logits_stride + offs, mask=inside, other=float("-inf")).to(tl.float32)
        scaled = raw
        if SCALE:
            scaled = tl.math.div_rn(raw, temperature)
        if GREEDY:
            score = raw
        else:
            code = tl.load(codes_ptr + offs, mask=inside, other=0).to(tl.uint32, bitcast=True)
            x = code ^ key
            x = x ^ (x >> 16)
            x = x * 0x7FEB352D
            x = x ^ (x >> 15)
            x = x * 0x846CA68B
            high = x.to(tl.int32, bitcast=True) >> 9
            uniform = high.to(tl.float32) * 1.1920928955078125e-07 + 0.5000000596046448
            score = scaled - tl.log(-tl.log(uniform))
            if HAS_KTH:
                score = tl.where(scaled < kth, float("-inf"), score)
            if HAS_DROP:
                dropped = tl.load(drop_ptr + row * drop_stride + offs, mask=inside, other=1)
                score = tl.where(dropped != 0, float("-inf"), score)
            score = tl.where(inside, score, float("-inf"))
        block_best = tl.max(score, 0)
        block_index = tl.argmax(score, 0)
        block_scaled = tl.sum(tl.where(offs == start + block_index, scaled, 0.0), 0)
        better = block_best > best
        best_index = tl.where(better, start + block_index, best_index)
        best_scaled = tl.where(better, block_scaled, best_scaled)
        best = tl.where(better, block_best, best)
        new_max = tl.maximum(run_max, tl.max(scaled, 0))
        run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(scaled - new_max), 0)
        run_max = new_max
    tl.store(tokens_ptr + row, best_index)  # cast to int64 by the store
    tl.store(logprobs_ptr + row, (best_scaled - run_max) - tl.log(run_sum))


def prepare(
    logits: torch.Tensor, params: SamplingParams
) -> tuple[torch.Tensor, bool, torch.Tensor | None, torch.Tensor | None]:
    """What the kernel reads besides the noise, made by torch: the logits it scans (the raw ones, or for
    top-p the scaled float32 ones), whether it divides them by ``T``, the rows' top-k thresholds ``[B]``
    (the scaled k-th largest logit) or None, and the top-p drop mask ``[B, V]`` or None."""
    rows, vocab = logits.shape
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    temperature = params.logprob_temperature if params.greedy else params.temperature
    scale = temperature != 1
    if params.greedy:
        return logits, scale, None, None
    if params.top_p < 1.0:  # the nucleus needs a sort: filtered by torch, as a mask
        scaled = logits.float() / temperature if scale else logits.float()
        return scaled, False, None, _dropped(scaled, params.top_k, params.top_p)
    if 0 < params.top_k < vocab:  # the k-th largest scaled logit is the scaled k-th largest logit
        kth = torch.topk(logits, params.top_k, dim=-1).values[:, -1].float()
        return logits, scale, kth / temperature if scale else kth, None
    return logits, scale, None, None


def fused_sample(
    logits: torch.Tensor, params: SamplingParams, keys: torch.Tensor | None, codes: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens ``[B]`` (int64) and their log-probs ``[B]`` (float32) for ``logits [B, V]`` (any float dtype),
    the rows' int32 step ``keys [B]`` (:meth:`rlcore_plugin_hf.row_noise.RowNoise.step_keys`; None when
    greedy) and the vocabulary ``codes [V]`` (:func:`rlcore_plugin_hf.row_noise.vocab_codes`): the tokens
    :func:`rlcore_plugin_hf.sampler.sample_next_tokens` picks with the same noise."""
    rows, vocab = logits.shape
    source, scale, kth, drop = prepare(logits, params)
    tokens = torch.empty(rows, dtype=torch.long, device=logits.device)
    logprobs = torch.empty(rows, dtype=torch.float32, device=logits.device)
    _sample_kernel[(rows,)](
        source,
        source.stride(0),
        codes if keys is None else keys,  # greedy reads no key
        codes,
        tokens if kth is None else kth,  # an unread placeholder without a threshold
        tokens if drop is None else drop,  # an unread placeholder without a mask
        0 if drop is None else drop.stride(0),
        tokens,
        logprobs,
        vocab,
        float(params.logprob_temperature if params.greedy else params.temperature),
        SCALE=scale,
        GREEDY=params.greedy,
        HAS_KTH=kth is not None,
        HAS_DROP=drop is not None,
        BLOCK=BLOCK,
    )
    return tokens, logprobs
