"""GDPO (arXiv:2601.05242, verl 0.10's ``algorithm.adv_estimator=gdpo``): group reward-decoupled normalisation.
Each reward component (a key of the dict the reward function returns) is normalised within its group on its
own, as GRPO does with the total, before the components are summed; so a component with a large scale cannot
drown out the others."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rlcore.api import RLCoreError, masked_whiten
from rlcore_plugin_grpo.advantage import group_relative
from rlcore_plugin_grpo.config import GRPOAlgorithmConfig

KEYS = "algorithm.gdpo_reward_keys"
WEIGHTS = "algorithm.gdpo_reward_weights"


def _components(config: GRPOAlgorithmConfig | None, reward_extras: Mapping[str, Sequence[Any]]) -> list[str]:
    """The reward components ``config.gdpo_reward_keys`` names; an error names a missing one."""
    keys = list((config or GRPOAlgorithmConfig()).gdpo_reward_keys or [])
    if not keys:
        raise RLCoreError(
            f"algorithm.adv_estimator=gdpo needs {KEYS}: the keys of the dict your reward function returns that "
            f"GDPO normalises one by one (e.g. {KEYS}='[accuracy_reward, format_reward]')"
        )
    missing = [key for key in keys if key not in reward_extras]
    if missing:
        returned = ", ".join(sorted(reward_extras)) or "none"
        raise RLCoreError(
            f"{KEYS} names {', '.join(missing)}, which the reward function did not return (it returned: "
            f"{returned}); return a dict with these keys from compute_score"
        )
    return keys


def _weights(config: GRPOAlgorithmConfig | None, count: int) -> list[float]:
    """``config.gdpo_reward_weights`` (one per component), or all ones."""
    weights = (config or GRPOAlgorithmConfig()).gdpo_reward_weights
    if weights is None:
        return [1.0] * count
    weights = [float(w) for w in weights]
    if len(weights) != count:
        raise RLCoreError(f"{WEIGHTS} has {len(weights)} weights for the {count} keys of {KEYS}")
    return weights


@torch.no_grad()
def compute_gdpo_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    config: GRPOAlgorithmConfig | None,
    reward_extras: Mapping[str, Sequence[Any]] | None = None,
    epsilon: float = 1e-6,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GDPO advantages, one value per response broadcast over its tokens.

    For each component k of ``config.gdpo_reward_keys`` (per-sample values in ``reward_extras``):
    A_k = GRPO's group-relative advantage of r_k (:func:`~rlcore_plugin_grpo.advantage.group_relative`,
    ``norm_adv_by_std_in_grpo`` honoured); then A = Σ_k w_k·A_k with the weights ``config.gdpo_reward_weights``
    (default 1), whitened over the batch's response tokens (masked mean, unbiased variance, ε = 1e-8) and zero
    where ``response_mask`` is 0. ``token_level_rewards`` only gives the dtype: the components replace the total.
    Returns ``(A, A)``. Raises :class:`~rlcore.errors.RLCoreError` when the keys are not set or the reward
    function did not return one of them.
    """
    extras = reward_extras or {}
    keys = _components(config, extras)
    total = torch.zeros(response_mask.shape[0], dtype=torch.float32, device=response_mask.device)
    for key, weight in zip(keys, _weights(config, len(keys))):
        scores = torch.tensor([float(v) for v in extras[key]], dtype=torch.float32, device=response_mask.device)
        total += weight * group_relative(scores, index, config, epsilon)
    mask = response_mask.to(torch.float32)
    advantages = masked_whiten(total.unsqueeze(-1) * mask, response_mask) * mask
    if token_level_rewards.is_floating_point():
        advantages = advantages.to(token_level_rewards.dtype)
    return advantages, advantages.clone()
