"""Rule rewards plus a reward model: the reward manager of a run with a reward-model worker group.

The rule scorer runs first (the configured reward manager); its sequence scores go to the reward model as
the batch column ``acc`` (outcome labels: PRIME's implicit PRM trains on them). Then the reward model
scores the batch (``rm_scores``, ``[B, R]``):

- a discriminative reward model (``reward_model.enable``): each response's score is its reward-model score
  (on the last valid token) plus its rule score. Responses whose ``data_source`` has no rule scorer —
  typical of preference data such as hh-rlhf — get the reward-model score alone; with
  ``custom_reward_function.path`` set, every response is also scored by that function;
- an advantage estimator that reads ``rm_scores`` itself (PRIME: its ``batch_keys``): the scores stay the
  rule scores and ``rm_scores`` and ``acc`` go into the batch beside them. Validation batches are scored by
  the rules alone, so the reward model never sees (or trains on) validation data.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlcore.reward.managers import RewardResult
from rlcore.tracking.values import reduce_metrics

if TYPE_CHECKING:
    from rlcore.config.sections.reward_model import CustomRewardFunctionConfig
    from rlcore.registry import Registry


class ModelRewardManager:
    """Wraps the run's rule reward manager and the reward-model group (see the module docstring).

    Metrics of each call: ``reward/rm_score_mean`` (the mean of each response's summed ``rm_scores``),
    ``reward/rule_score_mean`` (over the responses that have a rule scorer), ``reward/rule_scored`` (how
    many), ``timing_s/reward_model`` (the reward-model call) and the reward-model worker's own metrics,
    plus the rule manager's.
    """

    batched = False

    def __init__(
        self, rule: Any, group: Any, custom: CustomRewardFunctionConfig, registry: Registry, separate: bool = False
    ) -> None:
        """``rule``: the reward manager from :func:`rlcore.reward.scoring.build_reward_manager`; ``group``: the
        reward-model worker group; ``custom``: the run's ``custom_reward_function`` section; ``registry``: the run's registry (which data
        sources have a ``reward_scorer``); ``separate``: keep ``rm_scores`` apart from the scores (the
        estimator reads them)."""
        self.rule = rule
        self.registry = registry
        self.group = group
        self.separate = separate
        self.custom = bool(custom.path)

    def _has_rule(self, data_sources: list[Any]) -> np.ndarray:
        """Which samples have a rule scorer: all with a custom function, else those whose data source has a
        registered ``reward_scorer``."""
        if self.custom:
            return np.ones(len(data_sources), dtype=bool)
        known = {source: self.registry.has("reward_scorer", str(source)) for source in set(data_sources)}
        return np.array([known[source] for source in data_sources], dtype=bool)

    def _rule_scores(self, batch: Any, metrics: dict[str, float]) -> tuple[torch.Tensor, dict[str, list]]:
        """``[B, R]`` rule scores (zero where a sample has no rule scorer) and their per-sample extras."""
        width = batch["responses"].shape[1]
        scores = torch.zeros(len(batch), width, dtype=torch.float32)
        has_rule = self._has_rule(list(batch["data_source"]))
        metrics["reward/rule_scored"] = float(has_rule.sum())
        extra: dict[str, list] = {}
        if not has_rule.any():
            return scores, extra
        rows = np.flatnonzero(has_rule)
        rule = self.rule(batch if has_rule.all() else batch[rows])
        scores[torch.as_tensor(rows)] = rule.token_level_scores.float()
        metrics.update(rule.metrics)
        metrics["reward/rule_score_mean"] = float(rule.token_level_scores.sum(-1).mean())
        for key, values in rule.extra_info.items():
            column: list = [None] * len(batch)
            for row, value in zip(rows, values, strict=True):
                column[int(row)] = value
            extra[key] = column
        return scores, extra

    def __call__(self, batch: Any) -> RewardResult:
        """Score ``batch`` with the rule scorer and the reward model."""
        metrics: dict[str, float] = {}
        scores, extra = self._rule_scores(batch, metrics)
        if self.separate and batch.meta.get("validate", False):
            return RewardResult(scores, extra, metrics)
        acc = scores.sum(-1)
        labelled = batch.select(batch.keys())
        labelled["acc"] = acc
        start = time.perf_counter()
        out = self.group.compute_rm_score(labelled)
        metrics["timing_s/reward_model"] = time.perf_counter() - start
        metrics.update(reduce_metrics(out.meta.get("metrics", {})))
        rm_scores = out["rm_scores"].float()
        metrics["reward/rm_score_mean"] = float(rm_scores.sum(-1).mean())
        if self.separate:
            return RewardResult(scores, extra, metrics, {"rm_scores": rm_scores, "acc": acc})
        return RewardResult(scores + rm_scores, extra, metrics)

    def close(self) -> None:
        """End the rule manager's scorer processes."""
        close = getattr(self.rule, "close", None)
        if callable(close):
            close()
