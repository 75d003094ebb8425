"""DAPO's reward manager: rlcore's naive scoring (with its safe scoring) plus the soft overlong punishment."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rlcore.api import NaiveRewardManager, RewardResult
from rlcore_plugin_dapo.config import OverlongBufferConfig
from rlcore_plugin_dapo.settings import overlong_buffer


def response_lengths(batch: Any) -> torch.Tensor:
    """The valid length of each response, counted like the naive manager places scores.

    ``attention_mask[:, -R:].sum()`` when the batch has ``prompts`` and an attention mask over ``P + R``
    (it counts tokens such as tool output that ``response_mask`` excludes), else ``response_mask.sum()``.
    """
    width = batch["responses"].shape[1]
    if "prompts" in batch and "attention_mask" in batch:
        attention = batch["attention_mask"]
        if attention.shape[1] == batch["prompts"].shape[1] + width:
            return attention[:, -width:].sum(dim=-1).long()
    return batch["response_mask"].sum(dim=-1).long()


class DAPORewardManager:
    """``reward_model.reward_manager=dapo``: score like ``naive``, then add DAPO's overlong penalty.

    Scoring is delegated to :class:`rlcore.reward.NaiveRewardManager`, so failing, hanging or
    non-numeric scorers are handled exactly as there. With ``reward_model.overlong_buffer.enable`` a
    response of L valid tokens gets min(−(L − (L_max − L_buf)) / L_buf · ``penalty_factor``, 0) added to
    its score, on its last valid token (see :class:`rlcore_plugin_dapo.settings.OverlongBuffer`).

    The per-sample extra information carries the scorer's dict keys, ``score`` (before the penalty) and
    ``acc`` (the scorer's own ``acc``, else the score before the penalty); with ``overlong_buffer.log``
    also ``overlong_reward`` and ``overlong``, and the metrics ``reward/overlong_ratio`` (fraction of
    penalised responses) and ``reward/overlong_reward_mean``. A batch carrying ``rm_scores`` is returned
    as the naive manager returns it, without a penalty.
    """

    batched = False

    def __init__(self, tokenizer: Any, scorer: Callable[..., Any], config: Any = None) -> None:
        """``config`` is the typed ``reward_model`` section with DAPO's ``overlong_buffer`` subsection (and the
        naive manager's keys); None: the defaults."""
        self.naive = NaiveRewardManager(tokenizer, scorer, config)
        self.overlong = overlong_buffer(OverlongBufferConfig() if config is None else config.overlong_buffer)

    def close(self) -> None:
        """End the naive manager's scorer processes (the controller calls it when the run ends)."""
        self.naive.close()

    def __call__(self, batch: Any) -> RewardResult:
        """Score ``batch`` and apply the overlong penalty."""
        result = self.naive(batch)
        if "rm_scores" in batch:
            return result
        raw = result.token_level_scores.sum(dim=-1).tolist()
        extra = {**result.extra_info, "score": raw}
        extra.setdefault("acc", raw)
        if not self.overlong.enable:
            return RewardResult(result.token_level_scores, extra, dict(result.metrics))
        buffer = self.overlong
        lengths = response_lengths(batch).to(result.token_level_scores.device)
        excess = (lengths - buffer.expected_length).float()
        penalty = (-excess / buffer.length * buffer.penalty_factor).clamp(max=0.0)
        scores = result.token_level_scores.clone()
        rows = torch.arange(len(scores), device=scores.device)
        scores[rows, (lengths - 1).clamp(min=0)] += penalty
        metrics = dict(result.metrics)
        if buffer.log:
            extra["overlong_reward"] = penalty.tolist()
            extra["overlong"] = (penalty < 0).tolist()
            metrics["reward/overlong_ratio"] = (penalty < 0).float().mean().item() if len(penalty) else 0.0
            metrics["reward/overlong_reward_mean"] = penalty.mean().item() if len(penalty) else 0.0
        return RewardResult(scores, extra, metrics)
