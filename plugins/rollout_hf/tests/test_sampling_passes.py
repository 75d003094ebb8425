"""The sampler's restructured passes (filters written into the noisy scores in place, no filtered copy,
the uniform draws in one pass) pick exactly the tokens, with bit-identical log-probs, that the plain
definition picks: filter the scaled logits to ``-inf``, add the Gumbel draws, take the argmax."""

from __future__ import annotations

import pytest
import torch
from rlcore_plugin_hf.row_noise import RowNoise
from rlcore_plugin_hf.sampler import sample_next_tokens

from rlcore.rollout.sampling import SamplingParams


def definition(logits: torch.Tensor, params: SamplingParams, gumbel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens and log-probs by the definition, one step at a time (the sampler before its passes were
    restructured)."""
    logits = logits.float()
    scaled = logits / params.temperature
    filtered = scaled.clone()
    if 0 < params.top_k < logits.shape[-1]:
        kth = torch.topk(filtered, params.top_k, dim=-1).values[:, -1:]
        filtered.masked_fill_(filtered < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(filtered, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        drop_sorted = sorted_probs.cumsum(dim=-1) - sorted_probs >= params.top_p
        filtered.masked_fill_(torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted), float("-inf"))
    tokens = (filtered + gumbel).argmax(dim=-1)
    return tokens, torch.log_softmax(scaled, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.7, top_k=20),
        SamplingParams(temperature=1.3, top_p=0.8),
        SamplingParams(temperature=0.9, top_k=50, top_p=0.6),
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_sampler_picks_what_the_definition_picks(params: SamplingParams, dtype: torch.dtype) -> None:
    """Over 12 steps of 16 rows (bfloat16 logits: many ties at the top-k and top-p boundaries) the tokens
    are the same and the log-probs bit-identical, from the same counter-based noise."""
    torch.manual_seed(0)
    rows, vocab = 16, 3000
    noise = RowNoise(rows, vocab, 12, torch.device("cpu"))
    noise.seed(list(range(100, 100 + rows)))
    for step in range(12):
        logits = (3 * torch.randn(rows, vocab)).to(dtype)
        index = torch.tensor([step])
        expected = definition(logits, params, noise.gumbel(index))
        tokens, logprobs = sample_next_tokens(logits, params, None, with_logprobs=True, gumbel=noise.gumbel(index))
        assert torch.equal(tokens, expected[0])
        assert logprobs is not None and torch.equal(logprobs, expected[1])


def test_greedy_log_probs_at_temperature_zero_are_the_plain_log_softmax() -> None:
    """Greedy at temperature 0 takes the argmax and the log-softmax at temperature 1 (no scaling pass)."""
    logits = torch.randn(4, 500)
    tokens, logprobs = sample_next_tokens(logits, SamplingParams(temperature=0.0), None, with_logprobs=True)
    assert torch.equal(tokens, logits.argmax(-1))
    assert logprobs is not None
    assert torch.equal(logprobs, torch.log_softmax(logits, -1).gather(-1, tokens[:, None]).squeeze(-1))
