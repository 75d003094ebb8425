"""Train/inference mismatch: how far the rollout engine's log-probs are from the trainer's, the truncated
importance-sampling (TIS) weights that correct the policy gradient for it, and rejection sampling (RS) of
the tokens or responses that are too far off.

The rollout engine samples with its own kernels (vLLM, SGLang) and so from a slightly different policy
than the trainer's ``old_log_probs`` describe. With ``actor_rollout_ref.rollout.calculate_log_probs=true``
the engine returns ``rollout_log_probs``; the controller then logs the mismatch and, under
``algorithm.rollout_correction`` (verl's keys, log-ratio δ_t = old_t − rollout_t):

- ``rollout_is``: multiplies each token's policy loss by
  ``token``: ``w_t = min(exp(δ_t), threshold)``; ``sequence``: ``w = min(exp(Σ_t δ_t), threshold)`` for every
  token of the response (no gradient flows through ``w``; ``threshold`` is ``rollout_is_threshold``).
  ``rollout_is_batch_normalize`` then divides the weights by their batch mean (token level: over valid
  tokens; sequence level: over responses), so that they average 1.
- ``rollout_rs``: a comma-separated list of :data:`RS_OPTIONS` that must all pass, each with a threshold in
  ``rollout_rs_threshold`` (one shared or one per option, comma-separated). ``token_k*`` reject tokens,
  ``seq_{sum,mean,max}_k*`` whole responses, by the divergence k1 = −δ, k2 = ½δ², k3 = e^δ − 1 − δ. A k1
  threshold is a pair of ratio bounds ``"lower_upper"`` (one number u means ``1/u_u``) compared in log space;
  k2/k3 thresholds are upper bounds. Rejected tokens leave ``response_mask``.
- ``bypass_mode``: the engine's log-probs are the old policy (no trainer forward pass for them); the
  policy loss's ratio then corrects the mismatch itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from rlcore.algos.functional import masked_mean, masked_sum
from rlcore.api.batch import Batch
from rlcore.errors import RLCoreError

__all__ = [
    "apply_rollout_correction",
    "IS_LEVELS",
    "RS_OPTIONS",
    "RejectionRule",
    "parse_rejection_rules",
    "rejection_mask",
    "rollout_is_weights",
    "rollout_mismatch_metrics",
]

#: the values of ``algorithm.rollout_correction.rollout_is`` (besides null = off)
IS_LEVELS = ("token", "sequence")
#: the options of ``algorithm.rollout_correction.rollout_rs`` (verl's names)
RS_OPTIONS = (
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)
#: log-ratios are clamped to ±this before ``exp``
SAFETY_BOUND = 20.0
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
    batch_normalize: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance weights ``[B, R]`` (0 on padding) at ``level`` and their metrics
    (``rollout_corr/is_weight_mean`` before truncation, ``rollout_corr/is_truncated_frac``). With
    ``batch_normalize`` the truncated weights are divided by their mean (over valid tokens for ``token``,
    over non-empty responses for ``sequence``; left as they are when that mean is ≤ 1e-8), reported as
    ``rollout_corr/is_batch_norm_factor``."""
    if level not in IS_LEVELS:
        raise RLCoreError(f"{_KEY}.rollout_is must be one of {', '.join(IS_LEVELS)} or null, got {level!r}")
    if not threshold > 0:
        raise RLCoreError(f"{_KEY}.rollout_is_threshold must be > 0, got {threshold!r}")
    mask = response_mask.to(old_log_probs.dtype)
    log_ratio = (old_log_probs - rollout_log_probs).detach() * mask
    if level == "sequence":
        log_ratio = masked_sum(log_ratio, mask, dim=-1)[:, None].expand_as(mask)
    raw = log_ratio.clamp(max=SAFETY_BOUND).exp()
    weights = raw.clamp(max=threshold) * mask
    metrics = {
        "rollout_corr/is_weight_mean": float(masked_mean(raw, mask)),
        "rollout_corr/is_truncated_frac": float(masked_mean((raw > threshold).to(mask.dtype), mask)),
    }
    if batch_normalize:
        if level == "token":
            mean = masked_mean(weights, mask)
        else:
            non_empty = (mask.sum(dim=-1) > 0).to(mask.dtype)
            mean = masked_mean(masked_mean(weights, mask, dim=-1), non_empty)
        factor = float(mean) if float(mean) > 1e-8 else 1.0
        weights = weights / factor
        metrics["rollout_corr/is_batch_norm_factor"] = factor
    return weights, metrics


@dataclass(frozen=True)
class RejectionRule:
    """One ``rollout_rs`` option: its name and its bounds on the divergence (k1: log-ratio bounds)."""

    option: str
    upper: float
    lower: float | None = None

    def keep(self, log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Bool ``[B, R]``: the tokens this rule keeps (for a sequence option, every token of a kept response)."""
        delta = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
        kind = self.option.rsplit("_", 1)[1]
        if kind == "k1":
            stat = -delta
        elif kind == "k2":
            stat = 0.5 * delta.square()
        else:
            stat = torch.exp(delta) - 1.0 - delta
        if self.option.startswith("seq_sum"):
            stat = masked_sum(stat, mask, dim=-1)[:, None]
        elif self.option.startswith("seq_mean"):
            stat = masked_mean(stat, mask, dim=-1)[:, None]
        elif self.option.startswith("seq_max"):
            stat = stat.masked_fill(mask == 0, float("-inf")).max(dim=-1).values.clamp_min(0.0)[:, None]
        kept = stat <= self.upper
        if self.lower is not None:
            kept = kept & (stat >= self.lower)
        return kept.expand_as(mask)


def _rule(option: str, spec: str) -> RejectionRule:
    """The :class:`RejectionRule` of ``option`` with threshold text ``spec`` (see the module docstring)."""
    key = f"{_KEY}.rollout_rs_threshold"
    try:
        bounds = [float(part) for part in spec.split("_")]
    except ValueError as exc:
        raise RLCoreError(f"{key}: {spec!r} for {option} is not a number (or, for k1, 'lower_upper')") from exc
    if any(not bound > 0 for bound in bounds):
        raise RLCoreError(f"{key}: the bounds for {option} must be > 0, got {spec!r}")
    if option.endswith("k1"):
        if len(bounds) > 2:
            raise RLCoreError(f"{key}: {option} takes 'lower_upper' ratio bounds, got {spec!r}")
        lower, upper = bounds if len(bounds) == 2 else (1.0 / bounds[0], bounds[0])
        return RejectionRule(option, math.log(upper), math.log(lower))
    if len(bounds) != 1:
        raise RLCoreError(f"{key}: {option} takes a single upper bound, got {spec!r}")
    return RejectionRule(option, bounds[0])


def parse_rejection_rules(rollout_rs: Any, threshold: Any) -> list[RejectionRule]:
    """The rules of ``rollout_rs`` (comma-separated :data:`RS_OPTIONS`) with the bounds of
    ``rollout_rs_threshold`` (one spec shared by all options or one per option). Raises
    :class:`~rlcore.errors.RLCoreError` naming the key for an unknown option or a bad threshold."""
    options = list(dict.fromkeys(part.strip() for part in str(rollout_rs).split(",") if part.strip()))
    unknown = [option for option in options if option not in RS_OPTIONS]
    if not options or unknown:
        raise RLCoreError(
            f"{_KEY}.rollout_rs: unknown option(s) {', '.join(unknown) or repr(rollout_rs)}; "
            f"expected a comma-separated list of: {', '.join(RS_OPTIONS)}"
        )
    if threshold is None or isinstance(threshold, bool):
        raise RLCoreError(f"{_KEY}.rollout_rs is set, so {_KEY}.rollout_rs_threshold must be given")
    specs = [part.strip() for part in str(threshold).split(",") if part.strip()]
    if len(specs) not in (1, len(options)):
        raise RLCoreError(
            f"{_KEY}.rollout_rs_threshold has {len(specs)} thresholds for {len(options)} rollout_rs options; "
            "give one shared threshold or one per option"
        )
    return [_rule(option, spec) for option, spec in zip(options, specs * len(options) if len(specs) == 1 else specs)]


def rejection_mask(
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    rules: list[RejectionRule],
) -> tuple[torch.Tensor, dict[str, float]]:
    """``response_mask`` with the tokens (or responses) that fail any of ``rules`` set to 0, and the metrics
    ``rollout_corr/rs_masked_token_frac`` and ``rollout_corr/rs_masked_seq_frac`` (fractions of valid tokens
    and of non-empty responses that lost at least one token)."""
    mask = response_mask.to(old_log_probs.dtype)
    log_ratio = (old_log_probs - rollout_log_probs).detach()
    keep = torch.ones_like(mask, dtype=torch.bool)
    for rule in rules:
        keep = keep & rule.keep(log_ratio, mask)
    new_mask = response_mask * keep.to(response_mask.dtype)
    valid = mask.bool()
    rejected = valid & ~keep
    non_empty = valid.any(dim=-1)
    metrics = {
        "rollout_corr/rs_masked_token_frac": float(rejected.sum()) / max(float(valid.sum()), 1.0),
        "rollout_corr/rs_masked_seq_frac": float((rejected.any(dim=-1) & non_empty).sum())
        / max(float(non_empty.sum()), 1.0),
    }
    return new_mask, metrics


def apply_rollout_correction(batch: Batch, correction: Any) -> dict[str, float]:
    """Apply the ``algorithm.rollout_correction`` section to ``batch`` (which has ``old_log_probs`` and
    ``rollout_log_probs``) and return the metrics: the mismatch metrics always; with ``rollout_is`` the
    ``rollout_is_weights`` (batch-normalised with ``rollout_is_batch_normalize``); with ``rollout_rs`` the
    rejected tokens removed from ``response_mask``. The weights and the rejection are both computed from
    the mask as it came in."""
    old, rollout, mask = batch["old_log_probs"], batch["rollout_log_probs"], batch["response_mask"]
    metrics = rollout_mismatch_metrics(old, rollout, mask)
    level = correction.get("rollout_is", None)
    if level:
        weights, is_metrics = rollout_is_weights(
            old,
            rollout,
            mask,
            level,
            float(correction.get("rollout_is_threshold", 2.0)),
            bool(correction.get("rollout_is_batch_normalize", False)),
        )
        batch["rollout_is_weights"] = weights
        metrics.update(is_metrics)
    if correction.get("rollout_rs", None):
        rules = parse_rejection_rules(correction.rollout_rs, correction.get("rollout_rs_threshold", None))
        batch["response_mask"], rs_metrics = rejection_mask(old, rollout, mask, rules)
        metrics.update(rs_metrics)
    return metrics
