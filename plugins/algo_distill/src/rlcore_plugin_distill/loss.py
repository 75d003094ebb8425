"""The distillation term of the actor loss (verl 0.10's ``distillation_ppo_loss`` with a per-token estimator).

For each response token the student's log-prob ``log π_S(y_t)`` (this forward's, with gradients) and the
teacher's ``log π_T(y_t)`` (the batch's ``teacher_log_probs``) give a per-token reverse-KL estimate
``d_t = kl_penalty(log π_S, log π_T, loss_mode)`` — for ``k1``, ``d_t = log π_S − log π_T``, whose negative
``r_t = log π_T − log π_S`` is the dense per-token reward of on-policy distillation. ``loss_max_clamp``
clamps d_t to ±c. Then

* ``use_policy_gradient=true`` (PG OPD, Thinking Machines' recipe): the PPO clipped surrogate (``vanilla``,
  the section's own clip ratios) with advantage ``−d_t`` (detached), i.e. the reward r_t at each token;
* ``use_policy_gradient=false`` (GKD-style): ``agg(d_t)`` backpropagated directly (k3 by default).

The actor's loss becomes ``loss + distillation_loss_coef · distill`` with ``use_task_rewards`` (the policy
loss on the task reward's advantages, plus the entropy and KL terms), else ``distill`` alone. Metrics (verl's
names under the actor's prefix): ``actor/distillation/loss``, ``actor/distillation/abs_loss``,
``actor/distillation/loss_min``, ``actor/distillation/loss_max`` and, with the surrogate,
``actor/distillation/pg_clipfrac``, ``actor/distillation/pg_clipfrac_lower``, ``actor/distillation/ppo_kl``
(rlcore averages every actor metric over micro-batches, the min and max too).
"""

from __future__ import annotations

from typing import Any

import torch

from rlcore.algos import ActorLossTerm, agg_loss, kl_penalty, vanilla_policy_loss
from rlcore.errors import RLCoreError
from rlcore_plugin_distill.settings import LossSettings, distillation_settings

#: the batch key of the teacher's per-token log-probs ``[B, R]`` (the teacher worker's output)
TEACHER_LOG_PROBS = "teacher_log_probs"
PREFIX = "actor/distillation"


def token_losses(student: torch.Tensor, teacher: torch.Tensor, settings: LossSettings) -> torch.Tensor:
    """``[B, R]`` per-token distillation losses d_t (reverse-KL estimates, clamped by ``loss_max_clamp``)."""
    losses = kl_penalty(student, teacher, settings.loss_mode)
    if settings.loss_max_clamp is not None:
        losses = losses.clamp(-settings.loss_max_clamp, settings.loss_max_clamp)
    return losses


def distillation_loss(
    log_prob: torch.Tensor, micro: Any, settings: LossSettings, agg_mode: str, scale_factor: float | None
) -> tuple[torch.Tensor, dict[str, float]]:
    """The distillation loss of one micro-batch (see the module docstring) and its metrics."""
    if TEACHER_LOG_PROBS not in micro:
        raise RLCoreError(
            "distillation is enabled but the batch has no teacher_log_probs: the teacher stage did not run"
        )
    mask = micro["response_mask"].bool()
    losses = token_losses(log_prob, micro[TEACHER_LOG_PROBS].to(log_prob.dtype), settings)
    valid = losses.detach()[mask]
    metrics = {
        f"{PREFIX}/abs_loss": float(valid.abs().mean()) if valid.numel() else 0.0,
        f"{PREFIX}/loss_min": float(valid.min()) if valid.numel() else 0.0,
        f"{PREFIX}/loss_max": float(valid.max()) if valid.numel() else 0.0,
    }
    if settings.use_policy_gradient:
        clip = {
            "clip_ratio": settings.clip_ratio,
            "clip_ratio_low": settings.clip_ratio_low,
            "clip_ratio_high": settings.clip_ratio_high,
        }
        loss, pg_metrics = vanilla_policy_loss(
            micro["old_log_probs"], log_prob, -losses.detach(), micro["response_mask"], agg_mode, clip
        )
        metrics.update({f"{PREFIX}/{name.split('/', 1)[1]}": value for name, value in pg_metrics.items()})
    else:
        loss = agg_loss(losses, micro["response_mask"], agg_mode, scale_factor)
    metrics[f"{PREFIX}/loss"] = float(loss.detach())
    return loss, metrics


def make_distillation_term(config: Any) -> ActorLossTerm:
    """The actor loss term of a run with ``distillation.enabled`` (the step extension's ``loss_term``)."""
    settings = distillation_settings(config).loss
    actor = config.actor_rollout_ref.actor
    agg_mode = str(actor.loss_agg_mode)
    scale_factor = actor.get("loss_scale_factor", None)

    def term(log_prob: torch.Tensor, micro: Any, loss: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """``loss + coef · distill`` with task rewards, else ``distill``."""
        distill, metrics = distillation_loss(log_prob, micro, settings, agg_mode, scale_factor)
        if settings.use_task_rewards:
            return loss + settings.coef * distill, metrics
        return distill, metrics

    return term
