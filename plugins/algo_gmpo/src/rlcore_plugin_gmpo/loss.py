"""Geometric-Mean Policy Optimization (Zhao et al., 2025): maximise the geometric mean of the token
ratios of a response instead of their arithmetic mean, with the clip applied to each token's log-ratio."""

from __future__ import annotations

import torch

from rlcore.api import ActorConfig, clip_ratio_bounds, masked_mean

#: keeps the per-sequence means finite for a sequence without valid tokens (verl's value)
LENGTH_EPS = 1e-8
#: added to the importance weights before their log (verl's value)
WEIGHT_EPS = 1e-10


def geo_mean_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The GMPO loss and its metrics.

    With Δ_t = logπ_t − logπ_old,t, each token's log-ratio is clipped pessimistically for its advantage's
    sign: Δ̃_t = sign(A_t)·min(sign(A_t)·Δ_t, sign(A_t)·clamp(Δ_t, −ε_low, ε_high)) (ε from
    ``clip_ratio_low``/``clip_ratio_high``, falling back to ``clip_ratio``; the clip acts in log space).
    Per response i with |y_i| valid tokens: ρ_i = exp(Σ_t Δ̃_t / |y_i|), Ā_i = Σ_t A_t / |y_i|, and the
    loss is the plain mean over the batch's responses of −Ā_i·ρ_i. ``loss_agg_mode`` is not used (as in
    verl). ``rollout_is_weights`` enter as their per-sequence geometric mean.

    Metrics: ``actor/pg_clipfrac`` / ``actor/pg_clipfrac_lower`` (masked fraction of tokens whose log-ratio
    lies outside the clip range with A > 0 / A < 0) and ``actor/ppo_kl`` (masked mean of logπ_old − logπ).
    """
    eps_low, eps_high = clip_ratio_bounds(config)
    mask = response_mask.to(log_prob.dtype)
    log_ratio = log_prob - old_log_prob
    sign = torch.sign(advantages)
    clamped = log_ratio.clamp(-eps_low, eps_high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clamped)
    lengths = mask.sum(dim=-1) + LENGTH_EPS
    ratio = torch.exp((pessimistic * mask).sum(dim=-1) / lengths)
    seq_advantage = (advantages * mask).sum(dim=-1) / lengths
    seq_loss = -seq_advantage * ratio
    if rollout_is_weights is not None:
        seq_loss = seq_loss * torch.exp((torch.log(rollout_is_weights + WEIGHT_EPS) * mask).sum(dim=-1) / lengths)
    loss = seq_loss.mean()
    with torch.no_grad():
        outside = log_ratio != clamped
        metrics = {
            "actor/pg_clipfrac": masked_mean((outside & (advantages > 0)).float(), response_mask).item(),
            "actor/pg_clipfrac_lower": masked_mean((outside & (advantages < 0)).float(), response_mask).item(),
            "actor/ppo_kl": masked_mean(-log_ratio.float(), response_mask).item(),
        }
    return loss, metrics
