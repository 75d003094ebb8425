"""DPPO-Binary-TV (arXiv:2602.04879, verl's ``policy_loss.loss_mode=dppo_tv``): a trust region on the change of
each sampled token's probability (a binary total-variation divergence) instead of on the ratio. A token whose
probability has already moved past the threshold in the direction its advantage pushes loses its gradient;
the others are REINFORCE terms weighted by the truncated, stop-gradient importance ratio."""

from __future__ import annotations

import torch

from rlcore.api import LOG_RATIO_CLAMP, ActorConfig, agg_loss, clip_ratio_bounds, masked_mean


def dppo_tv_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The DPPO-Binary-TV loss ``−A·sg(min(r, c))·logπ·valid`` and its metrics.

    r = exp(clamp(logπ − logπ_old, ±20)); c is ``clip_ratio_c`` (of the actor section ``config``; None: its defaults). With
    p = exp(logπ), p_old = exp(logπ_old) and δ_low/δ_high the TV thresholds ``clip_ratio_low``/``clip_ratio_high``
    (falling back to ``clip_ratio``), a token is valid when A > 0 and p − p_old ≤ δ_high, or A ≤ 0 and
    p − p_old ≥ −δ_low; ``valid`` is a stop-gradient 0/1 mask. The token losses are multiplied by
    ``rollout_is_weights`` when given and aggregated by ``loss_agg_mode`` (``loss_scale_factor`` from ``config``).

    Metrics: ``actor/pg_clipfrac`` (masked fraction of invalid tokens), ``actor/pg_clipfrac_lower`` (masked
    fraction of valid tokens whose ratio was truncated) and ``actor/ppo_kl`` (masked mean of logπ_old − logπ).
    """
    actor = config or ActorConfig()
    delta_low, delta_high = clip_ratio_bounds(actor)
    truncation = float(actor.clip_ratio_c)
    log_ratio = (log_prob - old_log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    with torch.no_grad():
        moved = torch.exp(log_prob) - torch.exp(old_log_prob)
        valid = torch.where(advantages > 0, moved <= delta_high, moved >= -delta_low).to(log_prob.dtype)
        weight = ratio.clamp(max=truncation)
    token_loss = -advantages * weight * log_prob * valid
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights
    scale = actor.loss_scale_factor
    loss = agg_loss(token_loss, response_mask, loss_agg_mode, scale)
    with torch.no_grad():
        clipfrac = masked_mean((1.0 - valid).float(), response_mask)
        truncated = masked_mean((ratio > truncation).float() * valid, response_mask)
        ppo_kl = masked_mean(-log_ratio.float(), response_mask)
    return loss, {
        "actor/pg_clipfrac": clipfrac.item(),
        "actor/pg_clipfrac_lower": truncated.item(),
        "actor/ppo_kl": ppo_kl.item(),
    }
