"""The HF engine's batched sampling step on float32 logits ``[B, V]``.

Temperature scaling, then top-k and top-p filtering, then a draw with the Gumbel-max trick
(``argmax(logits / T + G)`` with ``G = -log(-log U)``, which equals the exponential race ``argmax(p / E)``
with ``E = -log U ~ Exp(1)``: the same distribution as ``multinomial``, without a softmax and several times
faster for small batches), from a caller-owned ``torch.Generator`` or caller-drawn Gumbel noise, so a run is
reproducible from its seed. Greedy decoding takes the argmax of the raw logits.
"""

from __future__ import annotations

import torch

from rlcore.api import SamplingParams

__all__ = ["sample_next_tokens"]


def _dropped(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor | None:
    """The entries of ``scaled [B, V]`` outside the top-k set (ties with the k-th value kept) or outside
    the top-p nucleus of what top-k keeps, as a boolean mask; None when neither filter is on. ``scaled``
    is not written."""
    vocab = scaled.shape[-1]
    drop = None
    if 0 < top_k < vocab:
        kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
        drop = scaled < kth
    if top_p < 1.0:
        kept = scaled if drop is None else scaled.masked_fill(drop, float("-inf"))
        sorted_logits, order = torch.sort(kept, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = sorted_probs.cumsum(dim=-1).sub_(sorted_probs)
        outside = torch.zeros_like(scaled, dtype=torch.bool).scatter_(-1, order, mass_before >= top_p)
        drop = outside if drop is None else drop.logical_or_(outside)
    return drop


def sample_next_tokens(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
    with_logprobs: bool = False,
    gumbel: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Pick one token per row of ``logits [B, V]``; returns ``(tokens [B], logprobs [B] or None)``.

    A sampled token is ``argmax(filtered logits / T + G)``; ``gumbel`` holds the Gumbel draws ``G [B, V]``
    when the caller draws them (per-row generators: :class:`rlcore_plugin_hf.row_noise.RowNoise`; the
    tensor is overwritten with the scores), else they are drawn from ``generator``. The passes over the
    vocabulary: the scaling by ``1 / T`` (none at ``T = 1``), the noise, one in-place sum with it, the
    filters' masks written into the sum (top-k: its selection and one comparison; top-p: a sort), the
    argmax, and the log-softmax for the log-probs.

    The log-prob of a token is taken from ``log_softmax(logits / T)`` with ``T =
    params.logprob_temperature``, before top-k/top-p filtering: the quantity a trainer recomputes with
    a teacher-forced forward pass at the same temperature.
    """
    logits = logits.float()
    if params.greedy:
        tokens = logits.argmax(dim=-1)
        temperature = params.logprob_temperature
        scaled = logits / temperature if with_logprobs and temperature != 1 else logits
    else:
        scaled = logits if params.temperature == 1 else logits / params.temperature
        drop = _dropped(scaled, params.top_k, params.top_p)
        if gumbel is None:
            uniform = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=torch.float32)
            gumbel = uniform.log_().neg_().log_().neg_()
        scores = gumbel.add_(scaled)  # G + s == s + G exactly: the sum the filtered logits would give
        if drop is not None:
            scores.masked_fill_(drop, float("-inf"))
        tokens = scores.argmax(dim=-1)
    if not with_logprobs:
        return tokens, None
    logprobs = torch.log_softmax(scaled, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
    return tokens, logprobs
