"""rlcore hooks of the OTB plugin. Imports no torch: the estimator is registered as a lazy target."""

from __future__ import annotations

from typing import Any

from rlcore import hookimpl
from rlcore.api import AdvantageEstimatorSpec

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_advantage_estimators(register: Any) -> None:
    """Register ``optimal_token_baseline``: reward-to-go minus a per-token baseline weighted by realized
    energy. It reads the old log-probs and the actor's Σπ² (``actor.calculate_sum_pi_squared=true``) and, with
    rollout importance sampling on, the IS weights."""
    register(
        "optimal_token_baseline",
        "rlcore_plugin_otb.advantage:compute_optimal_token_baseline_advantage",
        description="OTB: G_t - sum(G_t W_t)/sum(W_t) over the prompt's responses, W_t = cumulative 1-2pi+sum(pi^2)",
        spec=AdvantageEstimatorSpec(
            batch_keys=frozenset({"old_log_probs", "sum_pi_squared"}),
            optional_batch_keys=frozenset({"rollout_is_weights"}),
        ),
    )
