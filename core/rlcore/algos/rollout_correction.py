"""Train/inference mismatch: how far the rollout engine's log-probs are from the trainer's, and the
truncated importance-sampling (TIS) weights that correct the policy gradient for it.

The rollout engine samples with its own kernels (vLLM, SGLang) and so from a slightly different policy
than the trainer's ``old_log_probs`` describe. With ``actor_rollout_ref.rollout.calculate_log_probs=true``
the engine returns ``rollout_log_probs``; the controller then logs the mismatch and, with
``algorithm.rollout_correction.rollout_is`` set, multiplies each token's policy loss by

- ``token``:    ``w_t = min(exp(old_t − rollout_t), threshold)``
- ``sequence``: ``w   = min(exp(Σ_t (old_t − rollout_t)), threshold)`` for every token of the response

(no gradient flows through ``w``; ``threshold`` is ``algorithm.rollout_correction.rollout_is_threshold``).
"""

from __future__ import annotations

import torch

from rlcore.algos.functional import masked_mean, masked_sum
from rlcore.errors import RLCoreError

__all__ = ["IS_LEVELS", "rollout_is_weights", "rollout_mismatch_metrics"]

#: the values of ``algorithm.rollout_correction.rollout_is`` (besides null = off)
IS_LEVELS = ("token", "sequence")
_KEY = "algorithm.rollout_correction"


def rollout_mismatch_metrics(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """verl's mismatch metrics over valid tokens: ``training/rollout_probs_diff_{max,mean,std}`` of
    ``|exp(old) − exp(rollout)|``, and ``training/rollout_log_probs_diff_mean`` of ``old − rollout``."""
    mask = response_mask.bool()
    if not bool(mask.any()):
        return {}
    probs_diff = (old_log_probs.exp() - rollout_log_probs.exp()).abs()[mask]
    return {
        "training/rollout_probs_diff_max": float(probs_diff.max()),
        "training/rollout_probs_diff_mean": float(probs_diff.mean()),
        "training/rollout_probs_diff_std": float(probs_diff.std(unbiased=False)),
        "training/rollout_log_probs_diff_mean": float((old_log_probs - rollout_log_probs)[mask].mean()),
    }


def rollout_is_weights(
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    level: str,
    threshold: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance weights ``[B, R]`` (0 on padding) at ``level`` and their metrics
    (``rollout_corr/is_weight_mean`` before truncation, ``rollout_corr/is_truncated_frac``)."""
    if level not in IS_LEVELS:
        raise RLCoreError(f"{_KEY}.rollout_is must be one of {', '.join(IS_LEVELS)} or null, got {level!r}")
    if not threshold > 0:
        raise RLCoreError(f"{_KEY}.rollout_is_threshold must be > 0, got {threshold!r}")
    mask = response_mask.to(old_log_probs.dtype)
    log_ratio = (old_log_probs - rollout_log_probs).detach() * mask
    if level == "sequence":
        log_ratio = masked_sum(log_ratio, mask, dim=-1)[:, None].expand_as(mask)
    raw = log_ratio.clamp(max=20.0).exp()
    weights = raw.clamp(max=threshold) * mask
    metrics = {
        "rollout_corr/is_weight_mean": float(masked_mean(raw, mask)),
        "rollout_corr/is_truncated_frac": float(masked_mean((raw > threshold).to(mask.dtype), mask)),
    }
    return weights, metrics
