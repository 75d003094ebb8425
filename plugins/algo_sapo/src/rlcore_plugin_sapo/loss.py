"""Soft Adaptive Policy Optimization (Qwen, 2025): replace PPO's hard clip with a sigmoid gate on the
importance ratio, so off-policy tokens are down-weighted smoothly instead of losing their gradient at once."""

from __future__ import annotations

import torch

from rlcore.api import LOG_RATIO_CLAMP, RLCoreError, agg_loss, masked_mean
from rlcore_plugin_sapo.config import SAPOActorConfig

#: SAPO aggregates per sequence whatever ``loss_agg_mode`` says (as verl v0.9.0 does)
SAPO_LOSS_AGG_MODE = "seq-mean-token-mean"


def _temperature(config: SAPOActorConfig | None, key: str) -> float:
    """``config.<key>`` as a positive float (None: the :class:`SAPOActorConfig` defaults)."""
    value = float(getattr(config or SAPOActorConfig(), key))
    if not value > 0:
        raise RLCoreError(f"actor_rollout_ref.actor.{key} must be > 0 for the sapo loss, got {value}")
    return value


def sapo_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = SAPO_LOSS_AGG_MODE,
    config: SAPOActorConfig | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The SAPO loss ``−σ(τ·(r − 1))·(4/τ)·A`` and its metrics.

    r = exp(clamp(logπ − logπ_old, ±20)); τ is ``tau_pos`` where A > 0 and ``tau_neg`` elsewhere (SAPO's fields
    of the actor section ``config``, verl's defaults 1.0 and 1.05). At r = 1 the gate is 2/τ and its slope 1, so on-policy the gradient is PPO's.
    Token losses are multiplied by ``rollout_is_weights`` when given and always aggregated
    ``seq-mean-token-mean`` (``loss_agg_mode`` is not used, as in verl). Metric: ``actor/ppo_kl``.
    """
    tau_pos = _temperature(config, "tau_pos")
    tau_neg = _temperature(config, "tau_neg")
    log_ratio = (log_prob - old_log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    tau = torch.where(advantages > 0, tau_pos, tau_neg).to(ratio.dtype)
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    token_loss = -gate * advantages
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights
    loss = agg_loss(token_loss, response_mask, SAPO_LOSS_AGG_MODE)
    with torch.no_grad():
        ppo_kl = masked_mean(-log_ratio.float(), response_mask)
    return loss, {"actor/ppo_kl": ppo_kl.item()}
