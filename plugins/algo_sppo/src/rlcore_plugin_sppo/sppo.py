"""Self-Play Preference Optimization (Wu et al., 2024), as verl's recipe trains it with rule rewards:
regress each response's log-likelihood ratio onto its scaled reward advantage over the batch's soft mean."""

from __future__ import annotations

import math
from typing import Any

import torch

from rlcore.api import RLCoreError, masked_mean, masked_sum
from rlcore_plugin_sppo.config import SPPOActorConfig, SPPOAlgorithmConfig


def softmean(x: torch.Tensor, beta: float) -> torch.Tensor:
    """SoftMean_β(x) = (1/β)·log((1/n)·Σ exp(β·x_i)) of a 1-D tensor; the arithmetic mean when β = 0."""
    if beta == 0.0:
        return x.mean()
    return (torch.logsumexp(beta * x, dim=0) - math.log(x.shape[0])) / beta


@torch.no_grad()
def compute_sppo_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: SPPOAlgorithmConfig | None = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SPPO advantages: A_i = r_i − SoftMean_β(r) over the *whole batch* (not per prompt, as verl's recipe),
    with r_i the sum of response i's token-level rewards and β = ``algorithm.sppo_eta``. Broadcast over the
    response's valid tokens; the returns equal the advantages."""
    scores = token_level_rewards.double().sum(dim=-1)
    if scores.numel() == 0:
        raise RLCoreError("the sppo advantage estimator got an empty batch")
    advantages = (scores - softmean(scores, float((config or SPPOAlgorithmConfig()).sppo_eta))).float()
    advantages = advantages.unsqueeze(-1) * response_mask.to(torch.float32)
    return advantages, advantages.clone()


def sppo_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: SPPOActorConfig | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The SPPO loss and its metrics.

    Per response i: L_i = (Σ_t m_t·logπ_t − Σ_t m_t·logπ_old,t − η·A_i)², with η =
    ``actor_rollout_ref.actor.sppo_eta`` and A_i the response's advantage (the masked mean of its token
    advantages, which the ``sppo`` estimator makes constant). The loss is the mean of L_i over the responses
    with at least one valid token whatever ``loss_agg_mode`` says (verl's recipe). ``rollout_is_weights``
    scale each L_i by the masked mean of the response's weights.

    Metrics: ``actor/sppo_log_ratio`` (mean sequence log-ratio), ``actor/sppo_target`` (mean η·A_i) and
    ``actor/ppo_kl`` (masked mean of logπ_old − logπ). The value is ≥ 0 and not signed by A; the gradient
    2·(log-ratio − η·A) raises the likelihood of responses whose log-ratio is below their target.
    """
    eta = float((config or SPPOActorConfig()).sppo_eta)
    mask = response_mask.to(log_prob.dtype)
    log_ratio = masked_sum(log_prob, mask, dim=-1) - masked_sum(old_log_prob, mask, dim=-1)
    target = eta * masked_mean(advantages, mask, dim=-1)
    seq_loss = (log_ratio - target).square()
    if rollout_is_weights is not None:
        seq_loss = seq_loss * masked_mean(rollout_is_weights, mask, dim=-1)
    non_empty = (mask.sum(dim=-1) > 0).to(seq_loss.dtype)
    loss = (seq_loss * non_empty).sum() / non_empty.sum().clamp_min(1.0)
    with torch.no_grad():
        count = non_empty.sum().clamp_min(1.0)
        metrics = {
            "actor/sppo_log_ratio": ((log_ratio * non_empty).sum() / count).item(),
            "actor/sppo_target": ((target * non_empty).sum() / count).item(),
            "actor/ppo_kl": masked_mean((old_log_prob - log_prob).float(), response_mask).item(),
        }
    return loss, metrics
