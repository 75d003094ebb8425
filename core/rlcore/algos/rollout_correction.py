"""Train/inference mismatch: how far the rollout engine's log-probs are from the trainer's, the truncated
importance-sampling (TIS) weights that correct the policy gradient for it, and rejection sampling (RS) of
the tokens or responses that are too far off.

The rollout engine samples with its own kernels (vLLM, SGLang), and in asynchronous training with older
weights, so from a different policy than the trainer's ``old_log_probs`` describe. With
``actor_rollout_ref.rollout.calculate_log_probs=true`` the engine returns ``rollout_log_probs``; the controller
then logs the mismatch and, under
``algorithm.rollout_correction`` (verl's keys, log-ratio δ_t = old_t − rollout_t):

- ``rollout_is``: multiplies each token's policy loss by
  ``token``: ``w_t = min(exp(δ_t), threshold)``; ``sequence``: ``w = min(exp(Σ_t δ_t), threshold)`` for every
  token of the response (no gradient flows through ``w``; ``threshold`` is ``rollout_is_threshold``). With
  ``rollout_is_threshold="lower_upper"`` (IcePop) a weight outside the bounds is 0 instead of truncated.
  ``rollout_is_batch_normalize`` then divides the weights by their batch mean (token level: over valid
  tokens; sequence level: over responses), so that they average 1.
- ``rollout_rs``: a comma-separated list of :data:`RS_OPTIONS` that must all pass, each with a threshold in
  ``rollout_rs_threshold`` (one shared or one per option, comma-separated). ``token_k*`` reject tokens,
  ``seq_{sum,mean,max}_k*`` whole responses, by the divergence k1 = −δ, k2 = ½δ², k3 = e^δ − 1 − δ. A k1
  threshold is a pair of ratio bounds ``"lower_upper"`` (one number u means ``1/u_u``) compared in log space;
  k2/k3 thresholds are upper bounds. Rejected tokens leave ``response_mask``.
- ``bypass_mode=false`` (decoupled mode): the policy loss clips π_θ/π_old and multiplies each token's loss by
  the ``rollout_is`` weight π_old/π_behav (π_behav = ``rollout_log_probs``, per token the policy version that
  sampled it): with ``rollout_is`` set this is decoupled PPO (verl's and AReaL's), which verl spells the same
  way (no key of its own). Without ``rollout_is`` the behaviour log-probs only feed metrics and RS.
- ``bypass_mode``: the engine's log-probs are the old policy (no trainer forward pass for them) and the
  policy loss is :func:`bypass_policy_loss`: in each micro-batch it computes the IS weights and the RS mask
  from the *current* policy's detached log-probs against the rollout's (δ_t = logπ_θ − logπ_rollout), then
  ``loss_type=ppo_clip`` runs the configured policy loss (its ratio π_θ/π_rollout carries the correction, so
  the weights are only logged) on the tokens RS keeps, and ``loss_type=reinforce`` runs
  :func:`reinforce_policy_loss` with the weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from rlcore.algos.functional import agg_loss, loss_units, masked_mean, masked_sum
from rlcore.api.batch import Batch
from rlcore.api.components import PolicyLoss
from rlcore.config.sections.actor import ActorConfig
from rlcore.config.sections.algorithm import RolloutCorrectionConfig
from rlcore.errors import RLCoreError

__all__ = [
    "apply_rollout_correction",
    "bypass_policy_loss",
    "check_bypass_loss",
    "offpolicy_metrics",
    "IS_LEVELS",
    "LOSS_TYPES",
    "RS_OPTIONS",
    "RejectionRule",
    "parse_is_threshold",
    "parse_rejection_rules",
    "reinforce_policy_loss",
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
#: the values of ``algorithm.rollout_correction.loss_type``: the policy loss of ``bypass_mode``
LOSS_TYPES = ("ppo_clip", "reinforce")
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


def parse_is_threshold(spec: Any) -> tuple[float, float | None]:
    """``rollout_is_threshold`` as ``(upper, lower)``: a number (or a number's text) is the truncation bound of
    TIS (``lower`` None); ``"lower_upper"`` (verl's IcePop spelling, e.g. ``"0.5_2.0"``) bounds the weights on
    both sides. Raises :class:`~rlcore.errors.RLCoreError` naming the key for anything else."""
    key = f"{_KEY}.rollout_is_threshold"
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise RLCoreError(f"{key} must be a number > 0 or 'lower_upper' bounds, got {spec!r}")
    parts = str(spec).strip().split("_", 1)
    try:
        bounds = [float(part) for part in parts]
    except ValueError as exc:
        raise RLCoreError(f"{key} must be a number > 0 or 'lower_upper' bounds, got {spec!r}") from exc
    upper, lower = bounds[-1], (bounds[0] if len(bounds) == 2 else None)
    if not upper > 0 or (lower is not None and not 0 < lower <= upper):
        raise RLCoreError(f"{key}: bounds must be > 0 with lower ≤ upper, got {spec!r}")
    return upper, lower


def rollout_is_weights(
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    level: str,
    threshold: float | str,
    batch_normalize: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance weights ``[B, R]`` (0 on padding) at ``level`` and their metrics, verl's names. A
    ``threshold`` of ``"lower_upper"`` bounds (:func:`parse_is_threshold`) is verl's IcePop: a weight outside
    ``[lower, upper]`` becomes 0 instead of being truncated, reported as ``rollout_corr/rollout_is_oob_ratio``
    (the fraction of valid tokens whose weight is out of bounds). The other metrics:
    ``rollout_corr/rollout_is_mean`` (of the truncated weights), ``rollout_corr/rollout_is_ratio_fraction_high``
    (the fraction of valid tokens, or of non-empty responses for ``sequence``, whose weight is above ``upper``),
    ``rollout_corr/rollout_is_ratio_fraction_low`` (likewise below ``lower``, or below ``1 / upper`` without
    IcePop bounds: a diagnostic, such weights are kept), ``rollout_corr/rollout_is_{max,min,std}``
    (:func:`_spread_metrics`), ``rollout_corr/rollout_is_seq_*`` (:func:`_response_metrics`) and
    ``rollout_corr/rollout_is_eff_sample_size`` (1 / mean((w / mean w)²) of the truncated weights), all
    computed before the batch normalisation. With
    ``batch_normalize`` the truncated weights are divided by their mean (over valid tokens for ``token``,
    over non-empty responses for ``sequence``; left as they are when that mean is ≤ 1e-8), reported as
    ``rollout_corr/rollout_is_batch_norm_factor``."""
    if level not in IS_LEVELS:
        raise RLCoreError(f"{_KEY}.rollout_is must be one of {', '.join(IS_LEVELS)} or null, got {level!r}")
    upper, lower = parse_is_threshold(threshold)
    mask = response_mask.to(old_log_probs.dtype)
    log_ratio = (old_log_probs - rollout_log_probs).detach() * mask
    if level == "sequence":
        log_ratio = masked_sum(log_ratio, mask, dim=-1)[:, None].expand_as(mask)
    raw = log_ratio.clamp(max=SAFETY_BOUND).exp()
    non_empty = (mask.sum(dim=-1) > 0).to(mask.dtype)
    high = (raw > upper).to(mask.dtype)
    if lower is None:
        weights = raw.clamp(max=upper) * mask
    else:
        outside = high + (raw < lower).to(mask.dtype)
        weights = raw * (1.0 - outside) * mask
    lower_bound = 1.0 / upper if lower is None else lower
    low = (raw < lower_bound).to(mask.dtype)
    mean = masked_mean(weights, mask)
    metrics = {
        "rollout_corr/rollout_is_mean": float(mean),
        "rollout_corr/rollout_is_ratio_fraction_high": float(_share(high, mask, non_empty, level)),
        "rollout_corr/rollout_is_ratio_fraction_low": float(_share(low, mask, non_empty, level)),
        **_spread_metrics(weights, log_ratio, mask, non_empty, level, upper),
        **_response_metrics(weights, raw, mask, non_empty, (lower_bound, upper)),
    }
    if lower is not None:
        metrics["rollout_corr/rollout_is_oob_ratio"] = float(masked_mean(outside, mask))
    if float(mean) > 1e-8:
        metrics["rollout_corr/rollout_is_eff_sample_size"] = 1.0 / float(masked_mean((weights / mean).square(), mask))
    if batch_normalize:
        if level == "sequence":
            mean = masked_mean(masked_mean(weights, mask, dim=-1), non_empty)
        factor = float(mean) if float(mean) > 1e-8 else 1.0
        weights = weights / factor
        metrics["rollout_corr/rollout_is_batch_norm_factor"] = factor
    return weights, metrics


def _share(flags: torch.Tensor, mask: torch.Tensor, non_empty: torch.Tensor, level: str) -> torch.Tensor:
    """The share of ``flags`` (``[B, R]``, 0/1): of the valid tokens at ``token`` level, of the non-empty
    responses at ``sequence`` level (where every token of a response carries the response's flag)."""
    if level == "token":
        return masked_mean(flags, mask)
    return masked_mean(masked_mean(flags, mask, dim=-1), non_empty)


def _spread_metrics(
    weights: torch.Tensor,
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    non_empty: torch.Tensor,
    level: str,
    upper: float,
) -> dict[str, float]:
    """verl's ``rollout_corr/rollout_is_{max,min,std}``: at ``token`` level the largest and smallest applied
    weight of a valid token; at ``sequence`` level ``exp`` of the largest (clamped to :data:`SAFETY_BOUND`) and
    smallest log-ratio sum of a non-empty response; the standard deviation of the applied weights (clamped to
    ``[0, upper]``) over the valid tokens (0 for a single token). Empty without a valid token."""
    valid = mask.bool()
    if not bool(valid.any()):
        return {}
    if level == "token":
        picked = weights[valid]
        largest, smallest = float(picked.max()), float(picked.min())
    else:
        sums = log_ratio[:, 0][non_empty.bool()]
        largest = math.exp(min(float(sums.max()), SAFETY_BOUND))
        smallest = math.exp(float(sums.min()))
    clamped = weights.clamp(0.0, upper)[valid]
    spread = float(clamped.std(unbiased=False)) if clamped.numel() > 1 else 0.0
    return {
        "rollout_corr/rollout_is_max": largest,
        "rollout_corr/rollout_is_min": smallest,
        "rollout_corr/rollout_is_std": spread,
    }


def _response_metrics(
    weights: torch.Tensor,
    raw: torch.Tensor,
    mask: torch.Tensor,
    non_empty: torch.Tensor,
    bounds: tuple[float, float],
) -> dict[str, float]:
    """verl's per-response figures of the weights, over the non-empty responses: of each response's mean applied
    weight ``rollout_corr/rollout_is_seq_{mean,std,max,min}`` (std unbiased, 0 for one response) and
    ``rollout_is_seq_max_deviation`` (the largest distance from 1); of each response's mean weight before
    truncation the shares ``rollout_is_seq_fraction_high`` / ``_low`` above ``bounds[1]`` / below ``bounds[0]``.
    Empty without a non-empty response."""
    rows = non_empty.bool()
    if not bool(rows.any()):
        return {}
    applied = masked_mean(weights, mask, dim=-1)[rows]
    before = masked_mean(raw, mask, dim=-1)[rows]
    lower, upper = bounds
    return {
        "rollout_corr/rollout_is_seq_mean": float(applied.mean()),
        "rollout_corr/rollout_is_seq_std": float(applied.std()) if applied.numel() > 1 else 0.0,
        "rollout_corr/rollout_is_seq_max": float(applied.max()),
        "rollout_corr/rollout_is_seq_min": float(applied.min()),
        "rollout_corr/rollout_is_seq_max_deviation": float((applied - 1.0).abs().max()),
        "rollout_corr/rollout_is_seq_fraction_high": float((before > upper).float().mean()),
        "rollout_corr/rollout_is_seq_fraction_low": float((before < lower).float().mean()),
    }


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
    (verl's names) ``rollout_corr/rollout_rs_masked_fraction`` (of the valid tokens),
    ``rollout_corr/rollout_rs_seq_masked_fraction`` (of the non-empty responses that lost at least one token)
    and, for each rule, ``rollout_corr/rollout_rs_<option>_masked_fraction`` (the valid tokens it rejects) and
    ``rollout_corr/rollout_rs_<option>_seq_masked_fraction`` (the non-empty responses it takes a token from)."""
    mask = response_mask.to(old_log_probs.dtype)
    log_ratio = (old_log_probs - rollout_log_probs).detach()
    valid = mask.bool()
    tokens = max(float(valid.sum()), 1.0)
    non_empty = valid.any(dim=-1)
    responses = max(float(non_empty.sum()), 1.0)
    keep = torch.ones_like(mask, dtype=torch.bool)
    metrics: dict[str, float] = {}
    for rule in rules:
        kept = rule.keep(log_ratio, mask)
        prefix = f"rollout_corr/rollout_rs_{rule.option}"
        metrics[f"{prefix}_masked_fraction"] = float((valid & ~kept).sum()) / tokens
        metrics[f"{prefix}_seq_masked_fraction"] = float((valid & ~kept).any(dim=-1).sum()) / responses
        keep = keep & kept
    new_mask = response_mask * keep.to(response_mask.dtype)
    rejected = valid & ~keep
    metrics["rollout_corr/rollout_rs_masked_fraction"] = float(rejected.sum()) / tokens
    metrics["rollout_corr/rollout_rs_seq_masked_fraction"] = float(rejected.any(dim=-1).sum()) / responses
    return new_mask, metrics


def apply_rollout_correction(batch: Batch, correction: RolloutCorrectionConfig) -> dict[str, float]:
    """Apply the ``algorithm.rollout_correction`` section to ``batch`` (which has ``old_log_probs`` and
    ``rollout_log_probs``) and return the metrics: the mismatch metrics and the old policy's off-policy
    diagnostics against the rollout's (:func:`offpolicy_metrics`) always; with ``rollout_is`` the
    ``rollout_is_weights`` (batch-normalised with ``rollout_is_batch_normalize``); with ``rollout_rs`` the
    rejected tokens removed from ``response_mask``. The weights and the rejection are both computed from
    the mask as it came in. In ``bypass_mode`` nothing is done here (the old log-probs are the rollout's):
    :func:`bypass_policy_loss` corrects each micro-batch and reports the metrics. Raises
    :class:`~rlcore.errors.RLCoreError` naming the columns when their shapes differ."""
    old, rollout, mask = batch["old_log_probs"], batch["rollout_log_probs"], batch["response_mask"]
    if correction.bypass_mode:  # old is rollout: the bypass loss corrects per micro-batch
        return {}
    if not old.shape == rollout.shape == mask.shape:
        raise RLCoreError(
            f"{_KEY}: the batch's rollout_log_probs {tuple(rollout.shape)}, old_log_probs {tuple(old.shape)} and "
            f"response_mask {tuple(mask.shape)} must have one shape [responses, response length]: the rollout "
            "engine returned log-probs that do not line up with its responses"
        )
    metrics = {**rollout_mismatch_metrics(old, rollout, mask), **offpolicy_metrics(old, rollout, mask)}
    level = correction.rollout_is
    if level:
        weights, is_metrics = rollout_is_weights(
            old, rollout, mask, level, correction.rollout_is_threshold, bool(correction.rollout_is_batch_normalize)
        )
        batch["rollout_is_weights"] = weights
        metrics.update(is_metrics)
    if correction.rollout_rs:
        rules = parse_rejection_rules(correction.rollout_rs, correction.rollout_rs_threshold)
        batch["response_mask"], rs_metrics = rejection_mask(old, rollout, mask, rules)
        metrics.update(rs_metrics)
    return metrics


def check_bypass_loss(correction: RolloutCorrectionConfig, loss_mode: str) -> str:
    """The ``loss_type`` of ``correction`` (the ``algorithm.rollout_correction`` section), checked: one of
    :data:`LOSS_TYPES`, ``reinforce`` only in ``bypass_mode`` and only with the vanilla policy loss (REINFORCE
    replaces it). Raises :class:`~rlcore.errors.RLCoreError` naming the keys."""
    loss_type = correction.loss_type or RolloutCorrectionConfig.loss_type  # null: the default
    if loss_type not in LOSS_TYPES:
        raise RLCoreError(f"{_KEY}.loss_type must be one of {', '.join(LOSS_TYPES)}, got {loss_type!r}")
    if loss_type == "reinforce" and not correction.bypass_mode:
        raise RLCoreError(
            f"{_KEY}.loss_type=reinforce is the policy loss of bypass mode: set {_KEY}.bypass_mode=true "
            "(or leave loss_type at ppo_clip)"
        )
    if loss_type == "reinforce" and loss_mode != "vanilla":
        raise RLCoreError(
            f"{_KEY}.loss_type=reinforce replaces the policy loss, but actor_rollout_ref.actor.policy_loss.loss_mode="
            f"{loss_mode}: use loss_mode=vanilla, or loss_type=ppo_clip to keep {loss_mode} in bypass mode"
        )
    return str(loss_type)


def reinforce_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The REINFORCE loss of bypass mode: ``agg(−A · logπ_θ · w)`` with the (detached) importance weights
    ``w`` when given, else ``agg(−A · logπ_θ)``; no ratio and no clipping. ``old_log_prob`` (the rollout's
    in bypass mode) only feeds the metric ``actor/ppo_kl``, the masked mean of ``old − logπ_θ``.
    ``config`` is the actor section (its ``loss_scale_factor``; None: its defaults)."""
    token_loss = -advantages * log_prob
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights.detach()
    loss = agg_loss(token_loss, response_mask, loss_agg_mode, (config or ActorConfig()).loss_scale_factor)
    with torch.no_grad():
        ppo_kl = masked_mean((old_log_prob - log_prob).float(), response_mask)
    return loss, {"actor/ppo_kl": ppo_kl.item()}


def offpolicy_metrics(
    log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """verl's off-policy diagnostics (``compute_offpolicy_metrics``) of the trainer's policy ``log_probs`` (π_old
    in decoupled mode, the current policy in bypass mode) against the rollout's, over the valid tokens, with
    δ_t = log_probs_t − rollout_t and ``rollout_corr/`` names:

    - ``kl``: mean of −δ; ``k3_kl``: mean of e^δ − δ − 1 (δ clamped to ±:data:`SAFETY_BOUND`);
    - ``training_ppl``, ``rollout_ppl``: the mean over non-empty responses of exp(−mean token log-prob), and
      ``training_log_ppl``, ``rollout_log_ppl``: the mean of −mean token log-prob;
    - ``log_ppl_diff`` (mean), ``log_ppl_abs_diff`` (mean of the absolute value), ``log_ppl_diff_max``,
      ``log_ppl_diff_min`` of the per-response mean rollout log-prob minus mean trainer log-prob, and
      ``ppl_ratio``, the mean of its exp;
    - ``chi2_token``: mean of e^{2δ} − 1; ``chi2_seq``: the mean over non-empty responses of e^{2Σδ} − 1
      (the sums clamped to ±:data:`SAFETY_BOUND`).

    Per token these are the log-probs of whatever policy sampled that token, so a response whose tokens came
    from several policy versions needs nothing special. Empty without a valid token (verl averages the response
    figures over all rows, empty ones included; here only non-empty responses count)."""
    mask = response_mask.to(log_probs.dtype)
    non_empty = mask.sum(dim=-1) > 0
    if not bool(non_empty.any()):
        return {}
    delta = ((log_probs - rollout_log_probs) * mask).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    training = masked_mean(log_probs, mask, dim=-1)[non_empty]
    rollout = masked_mean(rollout_log_probs, mask, dim=-1)[non_empty]
    log_ppl_diff = rollout - training
    delta_sum = masked_sum(delta, mask, dim=-1)[non_empty].clamp(-SAFETY_BOUND, SAFETY_BOUND)
    return {
        "rollout_corr/kl": float(masked_mean(-delta, mask)),
        "rollout_corr/k3_kl": float(masked_mean(torch.exp(delta) - delta - 1.0, mask)),
        "rollout_corr/training_ppl": float(torch.exp(-training).mean()),
        "rollout_corr/training_log_ppl": float((-training).mean()),
        "rollout_corr/rollout_ppl": float(torch.exp(-rollout).mean()),
        "rollout_corr/rollout_log_ppl": float((-rollout).mean()),
        "rollout_corr/log_ppl_diff": float(log_ppl_diff.mean()),
        "rollout_corr/log_ppl_abs_diff": float(log_ppl_diff.abs().mean()),
        "rollout_corr/log_ppl_diff_max": float(log_ppl_diff.max()),
        "rollout_corr/log_ppl_diff_min": float(log_ppl_diff.min()),
        "rollout_corr/ppl_ratio": float(torch.exp(log_ppl_diff).mean()),
        "rollout_corr/chi2_token": float(masked_mean(torch.exp(2.0 * delta), mask)) - 1.0,
        "rollout_corr/chi2_seq": float(torch.exp(2.0 * delta_sum).mean()) - 1.0,
    }


def bypass_policy_loss(
    policy_loss: PolicyLoss, correction: RolloutCorrectionConfig, loss_mode: str = "vanilla"
) -> PolicyLoss:
    """The policy loss of ``bypass_mode`` (verl's ``bypass_mode`` loss), where ``old_log_prob`` is the
    rollout's. For each micro-batch, from the current policy's detached log-probs against the rollout's:
    the IS weights of ``rollout_is`` (:func:`rollout_is_weights`; ``rollout_is_batch_normalize`` divides by
    the micro-batch's mean) and the tokens ``rollout_rs`` keeps (:func:`rejection_mask`), both from the mask
    as it came in. ``loss_type=ppo_clip`` then calls ``policy_loss`` (the ``loss_mode`` component) on the
    kept tokens without weights (its ratio π_θ/π_rollout is the correction; the weights are only reported),
    ``reinforce`` calls :func:`reinforce_policy_loss` with the weights.

    Rejected tokens count in the loss's normaliser as zeros, as verl's global token count does: the loss is
    rescaled from the kept tokens' units to the micro-batch's (:func:`~rlcore.algos.functional.loss_units`), so
    the update loop's per-micro-batch shares stay right. Metrics: :func:`offpolicy_metrics` of the current
    policy, the IS and RS metrics (none for a micro-batch of padding only), and the inner loss's own."""
    loss_type = check_bypass_loss(correction, loss_mode)
    level = correction.rollout_is
    threshold = correction.rollout_is_threshold
    parse_is_threshold(threshold)
    normalize = bool(correction.rollout_is_batch_normalize)
    rules = (
        parse_rejection_rules(correction.rollout_rs, correction.rollout_rs_threshold) if correction.rollout_rs else []
    )
    truncated_weights = rollout_is_weights  # the loss's keyword argument of that name hides the function

    def loss(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        config: ActorConfig | None = None,
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The bypass loss of one micro-batch (see :func:`bypass_policy_loss`); ``rollout_is_weights`` is
        not used (the weights are computed here)."""
        current = log_prob.detach()
        metrics = offpolicy_metrics(current, old_log_prob, response_mask)
        weights = None
        if level:
            weights, is_metrics = truncated_weights(current, old_log_prob, response_mask, level, threshold, normalize)
            metrics.update(is_metrics)
        kept = response_mask
        if rules:
            kept, rs_metrics = rejection_mask(current, old_log_prob, response_mask, rules)
            metrics.update(rs_metrics)
        if not bool(response_mask.any()):  # padding only: its statistics would pull the averages to 0
            metrics = {}
        if loss_type == "reinforce":
            pg_loss, pg_metrics = reinforce_policy_loss(
                old_log_prob, log_prob, advantages, kept, loss_agg_mode, config, rollout_is_weights=weights
            )
        else:
            pg_loss, pg_metrics = policy_loss(old_log_prob, log_prob, advantages, kept, loss_agg_mode, config)
        units = loss_units(response_mask, loss_agg_mode)
        if rules and units:
            pg_loss = pg_loss * (loss_units(kept, loss_agg_mode) / units)
        return pg_loss, {**pg_metrics, **metrics}

    return loss
