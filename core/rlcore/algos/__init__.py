"""The algorithm math shared by every backend and plugin: masked reductions, losses, KL, metrics.

Importing this package imports torch; ``import rlcore`` does not import it.
"""

from rlcore.algos.functional import (
    agg_loss,
    entropy_from_logits,
    logprobs_at_ids,
    logprobs_from_logits,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    sum_pi_squared_from_logits,
    top_k_logprobs,
)
from rlcore.algos.grouping import GroupStats, group_ids, group_stats
from rlcore.algos.kl_control import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    make_kl_controller,
)
from rlcore.algos.losses import (
    LOG_RATIO_CLAMP,
    ActorLossTerm,
    build_actor_loss,
    clip_ratio_bounds,
    kl_penalty,
    value_loss,
    vanilla_policy_loss,
)
from rlcore.algos.metrics import compute_data_metrics, compute_throughput_metrics, compute_timing_metrics
from rlcore.config.algorithm_names import LOSS_AGG_MODES, check_kl_penalty, check_loss_agg_mode

__all__ = [
    "LOG_RATIO_CLAMP",
    "ActorLossTerm",
    "LOSS_AGG_MODES",
    "AdaptiveKLController",
    "FixedKLController",
    "GroupStats",
    "agg_loss",
    "apply_kl_penalty",
    "build_actor_loss",
    "check_kl_penalty",
    "check_loss_agg_mode",
    "clip_ratio_bounds",
    "compute_data_metrics",
    "compute_throughput_metrics",
    "compute_timing_metrics",
    "entropy_from_logits",
    "group_ids",
    "group_stats",
    "kl_penalty",
    "logprobs_at_ids",
    "logprobs_from_logits",
    "make_kl_controller",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "sum_pi_squared_from_logits",
    "top_k_logprobs",
    "value_loss",
    "vanilla_policy_loss",
]
