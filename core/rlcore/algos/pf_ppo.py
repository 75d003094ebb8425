"""PF-PPO, policy filtration (Zhang et al., 2024, arXiv:2409.06957): train on a batch resampled by how
reliable each response's reward is, so that responses with unreliable (middling) rewards are seen less.

verl's keys: ``algorithm.use_pf_ppo`` turns it on; ``algorithm.pf_ppo.reweight_method`` and
``algorithm.pf_ppo.weight_pow`` choose the weights, from the sequence scores s_i (the sum of
``token_level_scores``):

- ``pow``:        w_i = |s_i| ^ weight_pow
- ``max_min``:    w_i = 1 where s_i is the batch's maximum or minimum score, else 0
- ``max_random``: w_i = 0.4 where s_i is the batch's maximum, else 0.1

The batch is then resampled with replacement, B draws with probabilities ∝ max(w_i + 1e-8, 1e-8).
"""

from __future__ import annotations

import torch

from rlcore.api.batch import Batch
from rlcore.config.sections.algorithm import PFPPOConfig
from rlcore.errors import RLCoreError

__all__ = ["REWEIGHT_METHODS", "check_pf_ppo", "pf_ppo_indices", "pf_ppo_resample", "pf_ppo_weights"]

#: the values of ``algorithm.pf_ppo.reweight_method``
REWEIGHT_METHODS = ("pow", "max_min", "max_random")
#: added to every weight (and its floor), so that every response keeps a tiny chance (verl's value)
WEIGHT_FLOOR = 1e-8
_KEY = "algorithm.pf_ppo"


def check_pf_ppo(section: PFPPOConfig) -> tuple[str, float]:
    """``(reweight_method, weight_pow)`` of the ``algorithm.pf_ppo`` section, or an error naming the key."""
    method = section.reweight_method
    if method not in REWEIGHT_METHODS:
        raise RLCoreError(f"{_KEY}.reweight_method must be one of {', '.join(REWEIGHT_METHODS)}, got {method!r}")
    power = section.weight_pow
    if isinstance(power, bool) or not isinstance(power, (int, float)):
        raise RLCoreError(f"{_KEY}.weight_pow must be a number, got {power!r}")
    return method, float(power)


def pf_ppo_weights(scores: torch.Tensor, method: str, weight_pow: float) -> torch.Tensor:
    """The (unnormalised) resampling weights of the 1-D sequence ``scores`` (see the module docstring)."""
    scores = scores.double()
    if method == "pow":
        weights = scores.abs().pow(weight_pow)
    elif method == "max_min":
        weights = ((scores == scores.max()) | (scores == scores.min())).double()
    elif method == "max_random":
        weights = torch.where(scores == scores.max(), 0.4, 0.1).double()
    else:
        raise RLCoreError(f"{_KEY}.reweight_method must be one of {', '.join(REWEIGHT_METHODS)}, got {method!r}")
    return (weights + WEIGHT_FLOOR).clamp_min(WEIGHT_FLOOR)


def pf_ppo_indices(
    scores: torch.Tensor, method: str, weight_pow: float, generator: torch.Generator
) -> tuple[torch.Tensor, dict[str, float]]:
    """``len(scores)`` row indices drawn with replacement ∝ :func:`pf_ppo_weights`, and the metrics
    ``pf_ppo/unique_frac`` (distinct rows kept / rows) and ``pf_ppo/score_mean`` (mean score after
    resampling)."""
    weights = pf_ppo_weights(scores, method, weight_pow)
    indices = torch.multinomial(weights, len(scores), replacement=True, generator=generator)
    metrics = {
        "pf_ppo/unique_frac": len(torch.unique(indices)) / max(len(scores), 1),
        "pf_ppo/score_mean": float(scores.double()[indices].mean()) if len(scores) else 0.0,
    }
    return indices, metrics


def pf_ppo_resample(batch: Batch, section: PFPPOConfig, seed: int) -> tuple[Batch, dict[str, float]]:
    """``batch`` resampled by :func:`pf_ppo_indices` from its ``token_level_scores`` under the
    ``algorithm.pf_ppo`` ``section``, drawing with a generator seeded by ``seed``, and the metrics."""
    method, power = check_pf_ppo(section)
    generator = torch.Generator().manual_seed(int(seed))
    indices, metrics = pf_ppo_indices(batch["token_level_scores"].sum(dim=-1).cpu(), method, power, generator)
    return batch.index(indices.numpy()), metrics
