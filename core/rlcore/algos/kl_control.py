"""KL coefficient controllers for the in-reward KL penalty (``algorithm.kl_ctrl``), and the penalty itself."""

from __future__ import annotations

import torch

from rlcore.algos.functional import masked_mean
from rlcore.algos.losses import kl_penalty
from rlcore.config.algorithm_names import check_kl_ctrl, check_kl_penalty
from rlcore.config.sections.algorithm import KLControlConfig

#: the adaptive controller moves the proportional error at most this far per update
ADAPTIVE_ERROR_CLIP = 0.2


class FixedKLController:
    """A constant KL coefficient β."""

    def __init__(self, kl_coef: float) -> None:
        """Start (and stay) at ``kl_coef``."""
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Keep β unchanged (the signature matches :meth:`AdaptiveKLController.update`)."""


class AdaptiveKLController:
    """The proportional controller of Ziegler et al. (2019) that steers the observed KL towards a target.

    Each update: e = clip(kl / target − 1, ±0.2); β ← β·(1 + e·n_steps / horizon).
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: float) -> None:
        """Start at ``init_kl_coef``; ``target_kl`` and ``horizon`` are positive (checked by
        :func:`~rlcore.config.algorithm_names.check_kl_ctrl`)."""
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move β after a batch of ``n_steps`` samples whose mean KL was ``current_kl``."""
        error = min(max(float(current_kl) / self.target - 1.0, -ADAPTIVE_ERROR_CLIP), ADAPTIVE_ERROR_CLIP)
        self.value *= 1.0 + error * n_steps / self.horizon


KLController = FixedKLController | AdaptiveKLController


def make_kl_controller(section: KLControlConfig) -> KLController:
    """Build the controller described by the ``algorithm.kl_ctrl`` section (``type``: fixed | adaptive)."""
    if check_kl_ctrl(section.tree()) == "fixed":
        return FixedKLController(float(section.kl_coef))
    return AdaptiveKLController(float(section.kl_coef), float(section.target_kl), float(section.horizon))


def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    old_log_probs: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    kl_ctrl: KLController,
    kl_penalty_type: str = "kl",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Subtract β·KL from the token-level scores (``algorithm.use_kl_in_reward``) and update the controller.

    The KL is ``kl_penalty(old_log_probs, ref_log_prob, kl_penalty_type)`` on response tokens; the observed
    KL (batch mean of per-sequence masked means) drives ``kl_ctrl.update(kl, n_steps=batch size)``.
    Returns the token-level rewards and the metrics ``actor/reward_kl_penalty`` (the observed KL) and
    ``actor/reward_kl_penalty_coeff`` (the β that was applied).
    """
    check_kl_penalty(kl_penalty_type, "algorithm.kl_penalty")
    mask = response_mask.to(token_level_scores.dtype)
    beta = kl_ctrl.value
    with torch.no_grad():
        kld = kl_penalty(old_log_probs, ref_log_prob, kl_penalty_type) * mask
        rewards = token_level_scores - beta * kld
        current_kl = masked_mean(kld, mask, dim=-1).mean().item()
    kl_ctrl.update(current_kl, n_steps=token_level_scores.shape[0])
    return rewards, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}
