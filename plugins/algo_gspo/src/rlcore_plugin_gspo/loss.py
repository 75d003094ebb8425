"""Group Sequence Policy Optimization (Zheng et al., 2025): PPO's clipped surrogate on a sequence-level
importance ratio, the geometric mean of the response's token ratios."""

from __future__ import annotations

import torch

from rlcore.api import ActorConfig, agg_loss, clip_ratio_bounds, masked_mean

#: the per-token log of the sequence ratio is clamped to at most this before ``exp``
MAX_LOG_RATIO = 10.0


def gspo_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The GSPO loss (GSPO-token form) and its metrics.

    With Δ_t = logπ_t − logπ_old,t, the sequence ratio is s_i = exp(mean_t Δ_t) over the response's
    masked-in tokens. Each token uses log s_i,t = logπ_t − sg(logπ_t) + sg(log s_i), clamped to at most 10:
    its value is log s_i and its gradient that of logπ_t, so with one advantage per response the gradient
    is GSPO's. The loss is max(−A·s, −A·clip(s, 1 − ε_low, 1 + ε_high)) (ε from ``clip_ratio_low`` /
    ``clip_ratio_high``, falling back to ``clip_ratio``), times ``rollout_is_weights`` when given, and is
    aggregated by ``loss_agg_mode`` (with ``loss_scale_factor`` from ``config``). The paper averages per
    sequence (``seq-mean-token-mean``, which the ``gspo`` preset sets, and which verl v0.9.0 forces
    whatever the configured mode); rlcore's default mode is ``token-mean``.

    Metrics: ``actor/pg_clipfrac`` (masked fraction of tokens where the clipped term is larger) and
    ``actor/ppo_kl`` (masked mean of logπ_old − logπ).
    """
    eps_low, eps_high = clip_ratio_bounds(config)
    log_ratio = log_prob - old_log_prob
    seq_log_ratio = masked_mean(log_ratio, response_mask, dim=-1)
    token_log_ratio = log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1)
    ratio = torch.exp(token_log_ratio.clamp(max=MAX_LOG_RATIO))
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    token_loss = torch.maximum(loss_unclipped, loss_clipped)
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights
    scale = None if config is None else config.loss_scale_factor
    loss = agg_loss(token_loss, response_mask, loss_agg_mode, scale)
    with torch.no_grad():
        clipfrac = masked_mean((loss_clipped > loss_unclipped).float(), response_mask)
        ppo_kl = masked_mean(-log_ratio.float(), response_mask)
    return loss, {"actor/pg_clipfrac": clipfrac.item(), "actor/ppo_kl": ppo_kl.item()}
