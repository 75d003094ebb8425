"""Masked reductions, loss aggregation, and the log-probability / entropy of a categorical distribution given
its logits.

Every function takes a ``mask`` broadcastable to ``x`` (1 = the element counts, 0 = padding or a token
the policy is not trained on). Masks may be bool, integer or float; they are cast to ``x``'s dtype.
"""

from __future__ import annotations

import torch

from rlcore.config.algorithm_names import check_loss_agg_mode

#: added to the variance before the reciprocal square root in :func:`masked_whiten`
WHITEN_EPS = 1e-8


def _as_weights(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The mask as a floating tensor of ``like``'s dtype and device."""
    return mask.to(dtype=like.dtype, device=like.device)


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x * mask`` over ``dim`` (all elements when ``dim`` is None)."""
    weighted = x * _as_weights(mask, x)
    return weighted.sum() if dim is None else weighted.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over the masked elements along ``dim`` (all elements when ``dim`` is None).

    An empty selection gives 0, not NaN.
    """
    weights = _as_weights(mask, x).expand_as(x)
    total = masked_sum(x, weights, dim)
    count = weights.sum() if dim is None else weights.sum(dim=dim)
    return total / count.clamp_min(torch.finfo(x.dtype).tiny)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the masked elements of ``x`` (a scalar tensor).

    With ``unbiased`` the Bessel factor ``n / (n - 1)`` is applied when more than one element is selected;
    with one element the (zero) biased variance is returned instead of dividing by zero.
    """
    weights = _as_weights(mask, x).expand_as(x)
    mean = masked_mean(x, weights)
    variance = masked_mean((x - mean) ** 2, weights)
    if not unbiased:
        return variance
    count = weights.sum()
    bessel = torch.where(count > 1, count / (count - 1).clamp_min(1.0), torch.ones_like(count))
    return variance * bessel


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Normalise ``x`` by the masked mean and unbiased variance: ``(x - mean) * rsqrt(var + 1e-8)``.

    With ``shift_mean=False`` the mean is added back, so only the scale changes. Computed in float64 and
    returned in ``x``'s dtype, so that no finite float32 input overflows.
    """
    wide = x.double()  # the variance of large float32 values overflows float32; float64 holds it
    mean = masked_mean(wide, mask)
    variance = masked_var(wide, mask, unbiased=True)
    whitened = (wide - mean) * torch.rsqrt(variance + WHITEN_EPS)
    return (whitened if shift_mean else whitened + mean).to(x.dtype)


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Log-probability of ``labels`` under ``softmax(logits)``, in float32.

    ``logits`` is ``[..., V]`` and ``labels`` ``[...]``. Computed as ``z[label] - logsumexp(z)`` so the
    full ``[..., V]`` log-softmax is never stored.
    """
    logits = logits.float()
    picked = torch.gather(logits, -1, labels.long().unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of ``softmax(logits)`` over the last dimension, in float32: ``logsumexp(z) - Σ softmax(z)·z``."""
    logits = logits.float()
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def sum_pi_squared_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """``Σ_v softmax(z)_v²`` over the last dimension, in float32: ``exp(logsumexp(2z) − 2·logsumexp(z))``.

    The collision probability of the next-token distribution; the optimal token baseline reads it
    (``1 − 2π_t + Σπ²`` is the squared norm of the log-prob's gradient with respect to the logits).
    """
    logits = logits.float()
    return torch.exp(torch.logsumexp(2.0 * logits, dim=-1) - 2.0 * torch.logsumexp(logits, dim=-1))


def logprobs_at_ids(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``[..., k]`` log-probabilities of the vocabulary ids ``ids`` ``[..., k]`` under ``softmax(logits)``
    (``logits`` ``[..., V]``), in float32: ``z[id] − logsumexp(z)``, the full log-softmax never stored."""
    logits = logits.float()
    return torch.gather(logits, -1, ids.long()) - torch.logsumexp(logits, dim=-1, keepdim=True)


def top_k_logprobs(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` most likely ids ``[..., k]`` (int64, most likely first) of ``softmax(logits)`` and their
    log-probabilities in float32 (not renormalised over the ``k``)."""
    logits = logits.float()
    values, ids = torch.topk(logits, k, dim=-1)
    return ids, values - torch.logsumexp(logits, dim=-1, keepdim=True)


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Reduce a ``[B, R]`` token loss to a scalar.

    ``token-mean``: Σ(loss·mask) / Σmask. ``seq-mean-token-sum``: mean over non-empty sequences of the
    per-sequence token sums. ``seq-mean-token-mean``: mean over non-empty sequences of the per-sequence
    token means. ``seq-mean-token-sum-norm`` (Dr. GRPO): as verl since v0.8.0, the mean over non-empty sequences
    of the per-sequence token sums, divided by ``loss_scale_factor`` (default: the padded response length
    ``R``) — ``seq-mean-token-sum`` / scale.
    """
    check_loss_agg_mode(loss_agg_mode)
    mask = loss_mask.to(dtype=loss_mat.dtype, device=loss_mat.device)
    token_sums = (loss_mat * mask).sum(dim=-1)
    if loss_agg_mode == "token-mean":
        return token_sums.sum() / mask.sum().clamp_min(1.0)
    token_counts = mask.sum(dim=-1)
    non_empty = (token_counts > 0).to(loss_mat.dtype)
    per_seq = token_sums / token_counts.clamp_min(1.0) if loss_agg_mode == "seq-mean-token-mean" else token_sums
    seq_mean = (per_seq * non_empty).sum() / non_empty.sum().clamp_min(1.0)
    if loss_agg_mode == "seq-mean-token-sum-norm":
        return seq_mean / (float(loss_scale_factor) if loss_scale_factor else float(mask.shape[-1]))
    return seq_mean


def loss_units(response_mask: torch.Tensor, loss_agg_mode: str) -> float:
    """What :func:`agg_loss` divides a loss by: the tokens of ``response_mask`` (``token-mean``) or its
    non-empty sequences (the ``seq-mean-*`` modes; ``seq-mean-token-sum-norm`` also divides by a constant)."""
    if loss_agg_mode == "token-mean":
        return float(response_mask.sum())
    return float((response_mask.sum(-1) > 0).sum())
