"""The distillation term of the actor loss (verl 0.10's ``distillation_ppo_loss``).

Each response token gets a distillation loss d_t, by ``loss_mode``:

* a per-token reverse-KL estimator (``k1``, ``k3``, …): the student's log-prob ``log π_S(y_t)`` (this forward's,
  with gradients) and the teacher's ``log π_T(y_t)`` (the batch's ``teacher_log_probs``) give
  ``d_t = kl_penalty(log π_S, log π_T, loss_mode)`` — for ``k1``, ``d_t = log π_S − log π_T``, whose negative
  ``r_t = log π_T − log π_S`` is the dense per-token reward of on-policy distillation;
* ``forward_kl_topk``: the forward KL restricted to the teacher's ``topk`` most likely tokens ``v`` at the
  position, ``d_t = Σ_v π_T(v) (log π_T(v) − log π_S(v))`` with both log-probs floored at
  ``log_prob_min_clamp`` (neither renormalised over the k, as in verl), then clamped at 0 below (the truncated
  sum can be negative). The teacher's ids and log-probs are the batch's ``gather_ids`` and
  ``teacher_topk_log_probs``; the student's come out of the training forward (``gathered_log_probs``).

``loss_max_clamp`` clamps d_t to ±c. Then

* ``use_policy_gradient=true`` (PG OPD, Thinking Machines' recipe): the PPO clipped surrogate (``vanilla``,
  the section's own clip ratios) with advantage ``−d_t`` (detached), i.e. the reward r_t at each token;
* ``use_policy_gradient=false`` (GKD-style): ``agg(d_t)`` backpropagated directly (k3 by default).

The actor's loss becomes ``loss + distillation_loss_coef · distill`` with ``use_task_rewards`` (the policy
loss on the task reward's advantages, plus the entropy and KL terms), else ``distill`` alone. Metrics (verl's
names under the actor's prefix): ``actor/distillation/loss``, ``actor/distillation/loss_min``,
``actor/distillation/loss_max`` (of d_t before ``loss_max_clamp``), with an estimator
``actor/distillation/abs_loss``, with ``forward_kl_topk`` ``actor/distillation/{student,teacher}_mass`` and their
``_min``/``_max`` (the probability mass of the teacher's top-k under each model) and, with the surrogate,
``actor/distillation/pg_clipfrac``, ``actor/distillation/pg_clipfrac_lower``, ``actor/distillation/ppo_kl``
(rlcore averages every actor metric over micro-batches, the min and max too).
"""

from __future__ import annotations

from typing import Any

import torch

from rlcore.api import (
    GATHER_IDS,
    GATHERED_LOG_PROBS,
    ActorConfig,
    ActorLossTerm,
    RLCoreError,
    agg_loss,
    kl_penalty,
    vanilla_policy_loss,
)
from rlcore_plugin_distill.settings import LossSettings, distillation_settings

#: the batch key of the teacher's per-token log-probs ``[B, R]`` (the teacher worker's output)
TEACHER_LOG_PROBS = "teacher_log_probs"
#: the batch key of the teacher's top-k log-probs ``[B, R, k]`` (``forward_kl_topk``; their ids are the batch's
#: ``rlcore.api.training.GATHER_IDS``)
TEACHER_TOPK_LOG_PROBS = "teacher_topk_log_probs"
PREFIX = "actor/distillation"


def _require(micro: Any, key: str) -> torch.Tensor:
    """``micro[key]``, or an error saying which stage did not run."""
    if key not in micro:
        stage = "the teacher stage" if key.startswith("teacher") or key == GATHER_IDS else "the training forward"
        raise RLCoreError(f"distillation is enabled but the micro-batch has no {key}: {stage} did not provide it")
    return micro[key]


def _valid_stats(name: str, values: torch.Tensor, mask: torch.Tensor, *, with_mean: bool = True) -> dict[str, float]:
    """``{prefix}/{name}`` (the mean, ``with_mean``), ``_min`` and ``_max`` of ``values`` at ``mask`` (0 when empty)."""
    valid = values.detach()[mask]
    empty = not valid.numel()
    stats = {
        f"{PREFIX}/{name}_min": 0.0 if empty else float(valid.min()),
        f"{PREFIX}/{name}_max": 0.0 if empty else float(valid.max()),
    }
    if with_mean:
        stats[f"{PREFIX}/{name}"] = 0.0 if empty else float(valid.mean())
    return stats


def topk_losses(
    student: torch.Tensor, teacher: torch.Tensor, log_prob_min_clamp: float | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``[B, R]`` forward KL over the teacher's top-k, ``Σ_k π_T (log π_T − log π_S)`` of the ``[B, R, k]``
    log-probs (each floored at ``log_prob_min_clamp``), clamped at 0 below; and the ``[B, R]`` probability mass
    of those k tokens under the student and under the teacher (before the floor). An entry whose teacher
    log-prob is ``-inf`` (a padding id of a teacher whose vocabulary is larger than the student's: no token has
    it) is left out of all three."""
    present = torch.isfinite(teacher)
    teacher = torch.where(present, teacher, 0.0)
    student_mass = (student.detach().exp() * present).sum(-1)
    teacher_mass = (teacher.exp() * present).sum(-1)
    if log_prob_min_clamp is not None:
        student = student.clamp_min(log_prob_min_clamp)
        teacher = teacher.clamp_min(log_prob_min_clamp)
    losses = (present * teacher.exp() * (teacher - student)).sum(-1).clamp_min(0.0)
    return losses, student_mass, teacher_mass


def token_losses(
    log_prob: torch.Tensor, micro: Any, settings: LossSettings, mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """``[B, R]`` per-token distillation losses d_t of ``settings.loss_mode`` (see the module docstring),
    before ``loss_max_clamp``, and the mode's own metrics over the valid tokens ``mask``."""
    if not settings.uses_topk:
        losses = kl_penalty(log_prob, _require(micro, TEACHER_LOG_PROBS).to(log_prob.dtype), settings.loss_mode)
        valid = losses.detach()[mask]
        return losses, {f"{PREFIX}/abs_loss": float(valid.abs().mean()) if valid.numel() else 0.0}
    _require(micro, GATHER_IDS)
    student = _require(micro, GATHERED_LOG_PROBS)
    teacher = _require(micro, TEACHER_TOPK_LOG_PROBS).to(student.dtype)
    losses, student_mass, teacher_mass = topk_losses(student, teacher, settings.log_prob_min_clamp)
    return losses, {
        **_valid_stats("student_mass", student_mass, mask),
        **_valid_stats("teacher_mass", teacher_mass, mask),
    }


def distillation_loss(
    log_prob: torch.Tensor, micro: Any, settings: LossSettings, agg_mode: str, scale_factor: float | None
) -> tuple[torch.Tensor, dict[str, float]]:
    """The distillation loss of one micro-batch (see the module docstring) and its metrics."""
    mask = micro["response_mask"].bool()
    losses, metrics = token_losses(log_prob, micro, settings, mask)
    metrics.update(_valid_stats("loss", losses, mask, with_mean=False))
    if settings.loss_max_clamp is not None:
        losses = losses.clamp(-settings.loss_max_clamp, settings.loss_max_clamp)
    if settings.use_policy_gradient:
        clip = ActorConfig(
            clip_ratio=settings.clip_ratio,
            clip_ratio_low=settings.clip_ratio_low,
            clip_ratio_high=settings.clip_ratio_high,
        )
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
    actor = ActorConfig.from_tree(config)
    agg_mode = str(actor.loss_agg_mode)
    scale_factor = actor.loss_scale_factor

    def term(log_prob: torch.Tensor, micro: Any, loss: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """``loss + coef · distill`` with task rewards, else ``distill``."""
        distill, metrics = distillation_loss(log_prob, micro, settings, agg_mode, scale_factor)
        if settings.use_task_rewards:
            return loss + settings.coef * distill, metrics
        return distill, metrics

    return term
