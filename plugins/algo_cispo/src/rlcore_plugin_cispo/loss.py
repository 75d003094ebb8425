"""CISPO (MiniMax-M1, 2025): clip the importance-sampling weight, not the update. The clipped ratio is a
stop-gradient coefficient on the REINFORCE term, so no token loses its gradient to clipping."""

from __future__ import annotations

import torch

from rlcore.api import LOG_RATIO_CLAMP, ActorConfig, agg_loss, clip_ratio_bounds, masked_mean


def cispo_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The CISPO loss ``−sg(clip(r, 1 − ε_low, 1 + ε_high))·A·logπ`` and its metrics.

    r = exp(clamp(logπ − logπ_old, ±20)); ε from ``clip_ratio_low``/``clip_ratio_high`` (falling back to
    ``clip_ratio``). The token losses are multiplied by ``rollout_is_weights`` when given and aggregated by
    ``loss_agg_mode`` (``loss_scale_factor`` from ``config``). Like GPG's, the value is not signed by A
    (logπ ≤ 0); its gradient is −sg(clip(r))·A·∇logπ.

    Metrics: ``actor/pg_clipfrac`` (masked fraction of tokens whose ratio was clipped) and ``actor/ppo_kl``
    (masked mean of logπ_old − logπ).
    """
    eps_low, eps_high = clip_ratio_bounds(config)
    log_ratio = (log_prob - old_log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    token_loss = -clipped.detach() * advantages * log_prob
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights
    scale = None if config is None else config.loss_scale_factor
    loss = agg_loss(token_loss, response_mask, loss_agg_mode, scale)
    with torch.no_grad():
        clipfrac = masked_mean((ratio != clipped).float(), response_mask)
        ppo_kl = masked_mean(-log_ratio.float(), response_mask)
    return loss, {"actor/pg_clipfrac": clipfrac.item(), "actor/ppo_kl": ppo_kl.item()}
