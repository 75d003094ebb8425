"""A scorer's extra values must not replace batch keys.

The keys of a scorer's returned dict besides ``score`` become per-sample batch columns (for batch filters,
metrics and the generation dumps). One named like a batch key (``uid``, ``responses``, ``values`` ...) would
replace that key for the rest of the step: ``uid`` regroups GRPO's groups, ``values`` would be taken for the
critic's. :func:`check_reward_extras` refuses such a result with an error naming the key and the data source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlcore.reward.errors import RewardError

#: keys the step adds to the batch after scoring (the data flow of DESIGN.md §4 and the estimators' inputs)
STEP_KEYS: frozenset[str] = frozenset(
    {
        "token_level_scores",
        "token_level_rewards",
        "old_log_probs",
        "ref_log_prob",
        "values",
        "advantages",
        "returns",
        "rollout_log_probs",
        "sum_pi_squared",
        "rm_scores",
        "reward_baselines",
    }
)


def check_reward_extras(extras: Mapping[str, Sequence[Any]], batch: Any, scorer: str = "the reward scorer") -> None:
    """Raise :class:`RewardError` when an extra key of a reward result is a key of ``batch`` or one the step
    adds later (:data:`STEP_KEYS`); the message names the key, ``scorer`` and the data source and index of
    the first sample that has it."""
    for key, values in extras.items():
        if key not in batch and key not in STEP_KEYS:
            continue
        row = next((i for i, value in enumerate(values) if value is not None), 0)
        sources = batch["data_source"] if "data_source" in batch else None
        source = f"data_source {sources[row]!r}, " if sources is not None and row < len(sources) else ""
        where = "a key of the batch" if key in batch else "a key the step adds to the batch"
        raise RewardError(
            f"{scorer} ({source}sample {row}) returned the extra value {key!r}, which is {where}: it would replace "
            f"the batch's {key!r} for the rest of the step; rename it in the dict the scorer returns"
        )
