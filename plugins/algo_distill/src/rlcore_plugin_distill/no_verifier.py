"""The ``teacher_only`` reward manager: no verifier, every response scores 0 (the teacher is the only signal)."""

from __future__ import annotations

from typing import Any

import torch

from rlcore.api import RewardResult


class TeacherOnlyRewardManager:
    """Scores every response 0 without decoding it: for distillation runs without a verifier
    (``reward_model.reward_manager=teacher_only`` with ``distillation.distillation_loss.use_task_rewards=false``)."""

    def __init__(self, tokenizer: Any, scorer: Any, config: Any = None) -> None:
        """Take the reward manager's usual arguments; none of them is used."""
        del tokenizer, scorer, config

    def __call__(self, batch: Any) -> RewardResult:
        """``[B, R]`` zeros: no task reward."""
        return RewardResult(torch.zeros(batch["responses"].shape, dtype=torch.float32))
