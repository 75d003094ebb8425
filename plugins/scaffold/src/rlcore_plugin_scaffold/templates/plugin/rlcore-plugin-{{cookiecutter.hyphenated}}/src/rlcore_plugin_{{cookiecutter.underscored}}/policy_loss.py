"""The policy loss ``{{ cookiecutter.hyphenated }}`` (``actor_rollout_ref.actor.policy_loss.loss_mode={{ cookiecutter.hyphenated }}``).

What it computes: PPO's clipped surrogate with one symmetric clip range, ``clip_ratio`` of the actor
section. With ratio ρ = π/π_old per token, the token loss is −min(ρ·A, clip(ρ, 1−ε, 1+ε)·A), reduced to a
scalar by rlcore's :func:`rlcore.algos.agg_loss` in the run's ``loss_agg_mode``.

What to change: the token loss in :func:`compute_policy_loss`. Keep the signature (the training backend
calls it through :func:`rlcore.algos.build_actor_loss`, which adds the entropy bonus and the KL loss), keep
masked tokens out of the loss, return python floats as metrics, and keep the log-ratio clamped so that a
stale policy cannot overflow ``exp``. ``tests/test_policy_loss.py`` runs rlcore's contract suite on it in
every aggregation mode.
"""

from __future__ import annotations

import torch

from rlcore.api import ActorConfig, agg_loss, masked_mean

#: the log-ratio is clamped to ±this before ``exp``
LOG_RATIO_CLAMP = 20.0


def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str,
    config: ActorConfig | None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped surrogate loss and its metrics ``actor/pg_clipfrac`` and ``actor/ppo_kl``.

    ``config`` is the typed ``actor_rollout_ref.actor`` section (read ``config.clip_ratio``,
    ``config.loss_scale_factor``; a key of your own, declared by a ``config_defaults`` section at
    ``actor_rollout_ref.actor``, is a field of it too; None: the defaults); ``rollout_is_weights``, when
    given, multiplies each token's loss (rollout importance sampling).
    """
    actor = config or ActorConfig()
    clip = float(actor.clip_ratio)
    ratio = torch.exp((log_prob - old_log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip, 1.0 + clip) * advantages
    token_loss = -torch.minimum(unclipped, clipped)
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights
    loss = agg_loss(token_loss, response_mask, loss_agg_mode, actor.loss_scale_factor)
    with torch.no_grad():
        clipfrac = masked_mean((clipped < unclipped).float(), response_mask)
        ppo_kl = masked_mean(old_log_prob - log_prob, response_mask)
    return loss, {"actor/pg_clipfrac": clipfrac.item(), "actor/ppo_kl": ppo_kl.item()}
