"""KL estimators, the vanilla PPO policy loss, the clipped value loss and the actor loss.

The actor loss (:func:`build_actor_loss`) is what a training backend minimises: the registered policy
loss selected by ``actor_rollout_ref.actor.policy_loss.loss_mode``, minus the entropy bonus, plus the KL
loss against the reference policy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from rlcore.algos.functional import agg_loss, masked_mean
from rlcore.algos.rollout_correction import bypass_policy_loss
from rlcore.config.algorithm_names import (
    check_kl_penalty,
    check_loss_agg_mode,
    kl_base_type,
)
from rlcore.config.sections.actor import ActorConfig, PolicyLossConfig
from rlcore.config.sections.algorithm import RolloutCorrectionConfig
from rlcore.errors import RLCoreError
from rlcore.plugins import get_component
from rlcore.registry import UnknownComponentError

#: the log-ratio is clamped to ±this before ``exp`` (PPO ratio, low-variance KL)
LOG_RATIO_CLAMP = 20.0
#: the low-variance KL estimate is clamped to ±this
LOW_VAR_KL_CLAMP = 10.0

ActorLossFn = Callable[[torch.Tensor, torch.Tensor | None, Any], tuple[torch.Tensor, dict[str, float]]]
#: a plugin's term of the actor loss, ``term(log_prob, micro_batch, loss) -> (loss, metrics)``: it receives the
#: loss of the policy, entropy and KL terms and returns the micro-batch's loss (:mod:`rlcore.api.extensions`)
ActorLossTerm = Callable[[torch.Tensor, Any, torch.Tensor], tuple[torch.Tensor, dict[str, float]]]


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Token-wise estimate of KL(π‖π_ref) from sampled log-probs, with Δ = logprob − ref_logprob.

    ``kl``/``k1``: Δ. ``abs``: |Δ|. ``mse``/``k2``: ½Δ². ``low_var_kl``/``k3``: with x = clamp(−Δ, ±20),
    ``eˣ − x − 1`` clamped to ±10. A ``+`` suffix (``k3+``) is the straight-through variant: the forward
    value of the base estimator and the gradient of ``k2``.
    """
    base, straight_through = kl_base_type(kl_penalty, "kl_penalty")
    delta = logprob - ref_logprob
    if base in ("kl", "k1"):
        value = delta
    elif base == "abs":
        value = delta.abs()
    elif base in ("mse", "k2"):
        value = 0.5 * delta.square()
    else:
        x = (-delta).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        value = (torch.exp(x) - x - 1.0).clamp(-LOW_VAR_KL_CLAMP, LOW_VAR_KL_CLAMP)
    if not straight_through:
        return value
    k2 = 0.5 * delta.square()
    return k2 + (value - k2).detach()


def clip_ratio_bounds(config: ActorConfig | None) -> tuple[float, float]:
    """``(ε_low, ε_high)`` of a PPO-style ratio clip, read from the actor section (None: its defaults).

    ``clip_ratio_low`` and ``clip_ratio_high`` each fall back to ``clip_ratio`` when null; the ratio is
    clipped to ``[1 − ε_low, 1 + ε_high]``.
    """
    actor = config or ActorConfig()
    low, high = actor.clip_ratio_low, actor.clip_ratio_high
    return float(actor.clip_ratio if low is None else low), float(actor.clip_ratio if high is None else high)


def vanilla_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate with asymmetric clip ranges and dual clip, aggregated by ``loss_agg_mode``.

    ratio r = exp(clamp(logπ − logπ_old, ±20)); L1 = −A·r; L2 = −A·clip(r, 1−ε_low, 1+ε_high);
    Lc = max(L1, L2); for A < 0 the loss is min(Lc, −A·c). ε_low/ε_high are ``clip_ratio_low``/
    ``clip_ratio_high`` (falling back to ``clip_ratio``) and c is ``clip_ratio_c`` (must exceed 1), all of
    the actor section ``config`` (None: its defaults). The token losses are multiplied by ``rollout_is_weights`` when given.

    Returns the loss and the metrics ``actor/pg_clipfrac`` (fraction of tokens where the clipped term is
    larger), ``actor/pg_clipfrac_lower`` (fraction where the dual clip applies) and ``actor/ppo_kl``
    (masked mean of logπ_old − logπ), all python floats.
    """
    actor = config or ActorConfig()
    eps_low, eps_high = clip_ratio_bounds(actor)
    clip_c = float(actor.clip_ratio_c)
    if clip_c <= 1.0:
        raise RLCoreError(
            f"actor_rollout_ref.actor.clip_ratio_c must be greater than 1 (dual-clip lower bound), got {clip_c}"
        )
    log_ratio = (log_prob - old_log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss_max = torch.maximum(loss_unclipped, loss_clipped)
    dual_bound = -advantages * clip_c
    negative = advantages < 0
    token_loss = torch.where(negative, torch.minimum(loss_max, dual_bound), loss_max)
    if rollout_is_weights is not None:
        token_loss = token_loss * rollout_is_weights
    loss = agg_loss(token_loss, response_mask, loss_agg_mode, actor.loss_scale_factor)
    with torch.no_grad():
        clipfrac = masked_mean((loss_clipped > loss_unclipped).float(), response_mask)
        clipfrac_lower = masked_mean(((loss_max > dual_bound) & negative).float(), response_mask)
        ppo_kl = masked_mean((old_log_prob - log_prob).float(), response_mask)
    metrics = {
        "actor/pg_clipfrac": clipfrac.item(),
        "actor/pg_clipfrac_lower": clipfrac_lower.item(),
        "actor/ppo_kl": ppo_kl.item(),
    }
    return loss, metrics


def value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str,
    loss_scale_factor: float | None = None,
) -> tuple[torch.Tensor, float]:
    """The clipped critic loss: ½·agg(max((v − R)², (v_clip − R)²)) with v_clip = clip(v, v_old ± cliprange).

    Returns the loss and the clip fraction (masked fraction of tokens where the clipped term is larger).
    """
    vpreds_clipped = values + (vpreds - values).clamp(-cliprange_value, cliprange_value)
    loss_unclipped = (vpreds - returns).square()
    loss_clipped = (vpreds_clipped - returns).square()
    loss = 0.5 * agg_loss(torch.maximum(loss_unclipped, loss_clipped), response_mask, loss_agg_mode, loss_scale_factor)
    with torch.no_grad():
        clipfrac = masked_mean((loss_clipped > loss_unclipped).float(), response_mask)
    return loss, clipfrac.item()


def loss_terms(config: Any) -> list[ActorLossTerm]:
    """The actor loss terms the plugins' step extensions add to a run of ``config``: each extension's
    ``loss_term`` factory, imported and called with ``config``."""
    import importlib

    from rlcore.plugins import step_extensions

    terms: list[ActorLossTerm] = []
    for extension in step_extensions(config):
        if extension.loss_term is not None:
            module, _, attr = extension.loss_term.partition(":")
            terms.append(getattr(importlib.import_module(module), attr)(config))
    return terms


def build_actor_loss(
    actor_config: ActorConfig,
    terms: Sequence[ActorLossTerm] = (),
    rollout_correction: RolloutCorrectionConfig | None = None,
) -> ActorLossFn:
    """Build the actor's loss function from the ``actor_rollout_ref.actor`` section, the one the policy loss
    receives as its ``config`` (with the fields the plugins add there:
    :func:`rlcore.config.plugin_sections.plugin_section`).

    The returned ``loss_fn(log_prob, entropy, micro_batch) -> (loss, metrics)`` reads ``old_log_probs``,
    ``advantages``, ``response_mask`` (and ``rollout_is_weights`` and ``ref_log_prob`` when present or
    needed) from ``micro_batch`` and computes::

        loss = policy_loss − entropy_coeff · agg(entropy) + kl_loss_coef · agg(kl_penalty(logπ, logπ_ref))

    where the policy loss is the component named by ``policy_loss.loss_mode``, the entropy term is used
    when ``entropy_coeff != 0`` and the KL term when ``use_kl_loss``; each of ``terms`` (the plugins' loss
    terms, :func:`loss_terms`) then maps that loss to the final one, in order. Metrics: the policy loss's own,
    ``actor/pg_loss``, with the KL loss ``actor/kl_loss`` and ``actor/kl_coef``, and the terms' own. The component and
    the modes are resolved here, so a misconfiguration fails before training starts.

    With ``rollout_correction`` (the ``algorithm.rollout_correction`` section) in ``bypass_mode``, the policy
    loss is rollout correction's bypass loss around that component
    (:func:`rlcore.algos.rollout_correction.bypass_policy_loss`).
    """
    loss_mode = actor_config.policy_loss.loss_mode or PolicyLossConfig.loss_mode  # null: the default
    try:
        policy_loss = get_component("policy_loss", loss_mode)
    except UnknownComponentError as exc:
        raise UnknownComponentError(f"actor_rollout_ref.actor.policy_loss.loss_mode: {exc}") from exc
    if rollout_correction is not None and rollout_correction.bypass_mode:
        policy_loss = bypass_policy_loss(policy_loss, rollout_correction, loss_mode)
    agg_mode = check_loss_agg_mode(actor_config.loss_agg_mode, "actor_rollout_ref.actor.loss_agg_mode")
    scale_factor = actor_config.loss_scale_factor
    entropy_coeff = float(actor_config.entropy_coeff)
    use_kl_loss = bool(actor_config.use_kl_loss)
    kl_coef = float(actor_config.kl_loss_coef)
    kl_type = actor_config.kl_loss_type
    if use_kl_loss:
        check_kl_penalty(kl_type, "actor_rollout_ref.actor.kl_loss_type")

    def loss_fn(
        log_prob: torch.Tensor, entropy: torch.Tensor | None, micro_batch: Any
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The actor loss of one micro-batch and its metrics (see :func:`build_actor_loss`)."""
        mask = micro_batch["response_mask"]
        weights = micro_batch["rollout_is_weights"] if "rollout_is_weights" in micro_batch else None
        pg_loss, pg_metrics = policy_loss(
            micro_batch["old_log_probs"],
            log_prob,
            micro_batch["advantages"],
            mask,
            agg_mode,
            actor_config,
            rollout_is_weights=weights,
        )
        metrics = {**pg_metrics, "actor/pg_loss": pg_loss.detach().item()}
        loss = pg_loss
        if entropy_coeff != 0:
            if entropy is None:
                raise RLCoreError(
                    "actor_rollout_ref.actor.entropy_coeff is non-zero but the backend computed no entropy"
                )
            loss = loss - entropy_coeff * agg_loss(entropy, mask, agg_mode, scale_factor)
        if use_kl_loss:
            if "ref_log_prob" not in micro_batch:
                raise RLCoreError(
                    "actor_rollout_ref.actor.use_kl_loss is true but the batch has no ref_log_prob "
                    "(is the reference policy enabled?)"
                )
            kld = kl_penalty(log_prob, micro_batch["ref_log_prob"], kl_type)
            kl_loss = agg_loss(kld, mask, agg_mode, scale_factor)
            loss = loss + kl_coef * kl_loss
            metrics["actor/kl_loss"] = kl_loss.detach().item()
            metrics["actor/kl_coef"] = kl_coef
        for term in terms:
            loss, term_metrics = term(log_prob, micro_batch, loss)
            metrics.update(term_metrics)
        return loss, metrics

    return loss_fn
