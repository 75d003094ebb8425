"""Clip-Cov and KL-Cov (Cui et al., 2025, *The Entropy Mechanism of Reinforcement Learning for Reasoning
Language Models*): the policy's entropy collapses because of the few tokens whose log-probability and
advantage covary most; these losses restrain exactly those tokens.

Both read their settings from ``actor_rollout_ref.actor.policy_loss`` (``clip_cov_ratio``, ``clip_cov_lb``,
``clip_cov_ub``; ``kl_cov_ratio``, ``ppo_kl_coef``) and measure the centred covariance of each valid token,
cov_t = (A_t − mean A)·(logπ_t − mean logπ), the means taken over the micro-batch's masked-in tokens.
"""

from __future__ import annotations

import torch

from rlcore.api import LOG_RATIO_CLAMP, ActorConfig, RLCoreError, agg_loss, clip_ratio_bounds, masked_mean


def _option(config: ActorConfig | None, key: str) -> float:
    """``config.policy_loss.<key>`` as a float (None: the section's defaults)."""
    return float(getattr((config or ActorConfig()).policy_loss, key))


def _fraction(config: ActorConfig | None, key: str) -> float:
    """A token fraction option, which must lie in (0, 1]."""
    value = _option(config, key)
    if not 0.0 < value <= 1.0:
        raise RLCoreError(f"actor_rollout_ref.actor.policy_loss.{key} must be in (0, 1], got {value}")
    return value


def token_covariance(advantages: torch.Tensor, log_prob: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """(A − mean A)·(logπ − mean logπ) per token, means over the masked-in tokens; no gradient."""
    with torch.no_grad():
        log_prob = log_prob.detach()
        return (advantages - masked_mean(advantages, response_mask)) * (log_prob - masked_mean(log_prob, response_mask))


def random_subset(candidates: torch.Tensor, k: int) -> torch.Tensor:
    """A boolean mask of ``k`` positions drawn uniformly from the true positions of ``candidates`` (all of
    them when there are at most ``k``).

    The draw uses its own generator, seeded from ``torch.initial_seed()`` and the candidate positions: it
    leaves the global random state alone and is reproducible for the same inputs and the same seed.
    """
    flat = torch.nonzero(candidates.flatten()).squeeze(-1)
    if len(flat) > k:
        seed = (torch.initial_seed() + int(flat.sum().item())) % (1 << 63)
        order = torch.randperm(len(flat), generator=torch.Generator().manual_seed(seed))
        flat = flat[order[:k].to(flat.device)]
    picked = torch.zeros(candidates.numel(), dtype=torch.bool, device=candidates.device)
    picked[flat] = True
    return picked.view_as(candidates)


def _finish(
    token_loss: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str,
    config: ActorConfig | None,
    rollout_is_weights: torch.Tensor | None,
) -> torch.Tensor:
    """Apply the importance weights and aggregate (``loss_scale_factor`` from ``config``)."""
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights
    scale = None if config is None else config.loss_scale_factor
    return agg_loss(token_loss, response_mask, loss_agg_mode, scale)


def clip_cov_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clip-Cov: PPO's clipped surrogate, minus the gradient of a few random high-covariance tokens.

    ratio r = exp(clamp(logπ − logπ_old, ±20)); token loss max(−A·r, −A·clip(r, 1 − ε_low, 1 + ε_high))
    (no dual clip). Among the valid tokens that PPO did not clip and whose covariance lies strictly between
    ``clip_cov_lb`` and ``clip_cov_ub``, max(1, int(``clip_cov_ratio``·n_valid)) are drawn at random
    (:func:`random_subset`) and their loss is set to 0, so they get no gradient.

    Metrics: ``actor/pg_clipfrac`` (fraction of valid tokens where PPO's clipped term is larger),
    ``actor/clip_cov_frac`` (fraction of valid tokens detached by Clip-Cov) and ``actor/ppo_kl``.
    """
    eps_low, eps_high = clip_ratio_bounds(config)
    fraction = _fraction(config, "clip_cov_ratio")
    lower, upper = _option(config, "clip_cov_lb"), _option(config, "clip_cov_ub")
    valid = response_mask.bool()
    log_ratio = (log_prob - old_log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    ppo_clipped = loss_clipped > loss_unclipped
    cov = token_covariance(advantages, log_prob, response_mask)
    candidates = valid & ~ppo_clipped & (cov > lower) & (cov < upper)
    n_detach = max(1, int(fraction * int(valid.sum().item())))
    detached = random_subset(candidates, n_detach)
    token_loss = torch.maximum(loss_unclipped, loss_clipped).masked_fill(detached, 0.0)
    loss = _finish(token_loss, response_mask, loss_agg_mode, config, rollout_is_weights)
    with torch.no_grad():
        metrics = {
            "actor/pg_clipfrac": masked_mean(ppo_clipped.float(), response_mask).item(),
            "actor/clip_cov_frac": masked_mean(detached.float(), response_mask).item(),
            "actor/ppo_kl": masked_mean((old_log_prob - log_prob).float(), response_mask).item(),
        }
    return loss, metrics


def kl_cov_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL-Cov: the unclipped surrogate −A·r plus a KL penalty on the highest-covariance tokens.

    ratio r = exp(clamp(Δ, ±20)) with Δ = logπ − logπ_old; token loss −A·r, no clip. The k = int(n_valid ·
    ``kl_cov_ratio``) valid tokens with the largest covariance add ``ppo_kl_coef``·|Δ|; k = 0 (fewer than
    1/``kl_cov_ratio`` valid tokens) penalises none.

    Metrics: ``actor/kl_cov_frac`` (fraction of valid tokens penalised) and ``actor/ppo_kl`` (masked mean
    of logπ_old − logπ).
    """
    fraction = _fraction(config, "kl_cov_ratio")
    coef = _option(config, "ppo_kl_coef")
    valid = response_mask.bool()
    log_ratio = (log_prob - old_log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    token_loss = -advantages * torch.exp(log_ratio)
    n_valid = int(valid.sum().item())
    k = int(n_valid * fraction)
    penalised = torch.zeros_like(valid)
    if k > 0:
        cov = token_covariance(advantages, log_prob, response_mask).masked_fill(~valid, -torch.inf)
        penalised.view(-1)[torch.topk(cov.flatten(), k).indices] = True
        token_loss = token_loss + coef * log_ratio.abs() * penalised
    loss = _finish(token_loss, response_mask, loss_agg_mode, config, rollout_is_weights)
    with torch.no_grad():
        metrics = {
            "actor/kl_cov_frac": k / n_valid if n_valid else 0.0,
            "actor/ppo_kl": masked_mean((old_log_prob - log_prob).float(), response_mask).item(),
        }
    return loss, metrics
