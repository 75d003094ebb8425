"""The reward manager ``{{ cookiecutter.hyphenated }}`` (``reward_model.reward_manager={{ cookiecutter.hyphenated }}``).

What it does: decodes each response up to its last valid token, calls the scorer once per sample with
``(data_source, solution_str, ground_truth, extra_info)``, and puts the score on the response's last valid
token. A scorer that raises scores 0 for that sample and is counted in ``reward/scorer_errors``; the
other samples keep their scores. A dict returned by the scorer gives its ``"score"``; its other keys come
back per sample in ``RewardResult.extra_info``.

What to change: :meth:`RewardManager.score_sample` to shape the reward (length penalties, format
bonuses, ...), or ``__call__`` to score the whole batch at once (for a model-based reward). The built-in
``naive`` manager also enforces ``reward_model.scorer_timeout``; this one does not, so a scorer that
hangs stalls the step. ``tests/test_reward_manager.py`` runs rlcore's contract suite on it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rlcore.api import RewardModelConfig, RewardResult


class RewardManager:
    """Token-level scores for a generated batch, one scorer call per sample.

    Args:
        tokenizer: the policy's tokenizer (decodes the responses).
        scorer: ``(data_source, solution_str, ground_truth, extra_info=None) -> float | dict``.
        config: the typed ``reward_model`` section (``rlcore.api.RewardModelConfig``, with your
            ``config_defaults`` sections there as fields; None: the defaults).
    """

    def __init__(self, tokenizer: Any, scorer: Callable[..., Any], config: RewardModelConfig | None = None) -> None:
        self.tokenizer = tokenizer
        self.scorer = scorer
        self.config = config or RewardModelConfig()

    def score_sample(self, data_source: str, solution_str: str, ground_truth: Any, extra_info: Any) -> Any:
        """One sample's score: the scorer's return value (a number, or a dict with ``"score"``)."""
        return self.scorer(data_source, solution_str, ground_truth, extra_info)

    def __call__(self, batch: Any) -> RewardResult:
        """Score every sample of ``batch`` (``responses``, ``response_mask``, ``data_source``, ``reward_model``)."""
        responses, mask = batch["responses"], batch["response_mask"]
        lengths = mask.sum(dim=-1).long().tolist()
        scores = torch.zeros(responses.shape, dtype=torch.float32)
        extra_info: dict[str, list[Any]] = {}
        errors = 0
        for i, length in enumerate(lengths):
            text = self.tokenizer.decode(responses[i, :length].tolist(), skip_special_tokens=True)
            info = batch["extra_info"][i] if "extra_info" in batch else None
            try:
                value = self.score_sample(batch["data_source"][i], text, batch["reward_model"][i]["ground_truth"], info)
            except Exception:  # one bad sample must not stop the step: it scores 0 and is counted
                errors += 1
                value = 0.0
            if isinstance(value, dict):
                for key, extra in value.items():
                    if key != "score":
                        extra_info.setdefault(key, [None] * len(lengths))[i] = extra
                value = value["score"]
            scores[i, max(length - 1, 0)] = float(value)
        return RewardResult(scores, extra_info, {"reward/scorer_errors": float(errors)})
