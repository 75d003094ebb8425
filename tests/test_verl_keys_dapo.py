"""verl's PR #7792: DAPO's group filter reads the reward before the in-reward KL penalty (``metric=reward``, verl's
new default); in rlcore every reward metric does, because the batch filters run before the penalty exists."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from rlcore_plugin_dapo.filters import keep_varied_groups
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.api import Batch
from rlcore.errors import RLCoreError


def test_reward_metric_reads_the_scores_not_the_kl_penalised_rewards() -> None:
    """Group a's scores are constant, its KL-penalised rewards are not; group b's scores vary. ``reward`` (and
    ``seq_reward``) keep b only; ``seq_final_reward`` on a batch already carrying rewards would keep both."""
    scores = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 0.0], [0.0, 1.0]])
    rewards = scores - torch.tensor([[0.0, 0.1], [0.0, 0.3], [0.0, 0.2], [0.0, 0.1]])
    batch = Batch.from_dict(
        {
            "responses": torch.zeros(4, 2, dtype=torch.long),
            "token_level_scores": scores,
            "token_level_rewards": rewards,
            "uid": np.array(["a", "a", "b", "b"], dtype=object),
        }
    )

    def kept(metric: str) -> list[str]:
        config = OmegaConf.create({"algorithm": {"filter_groups": {"metric": metric}}})
        return keep_varied_groups(batch, config)[0]["uid"].tolist()

    assert kept("reward") == kept("seq_reward") == ["b", "b"]
    assert kept("seq_final_reward") == ["a", "a", "b", "b"]


def test_the_filter_sees_the_batch_before_the_kl_penalty(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A real run with ``use_kl_in_reward=true``: the filter's batch has the scores but neither the reference
    log-probs nor the penalised rewards (the metric error lists the batch's keys at filter time)."""
    task = make_tiny_task(tmp_path / "task")
    with pytest.raises(RLCoreError, match="no per-sample 'ref_log_prob' values") as caught:
        tiny_run(
            tmp_path,
            tiny_model_dir,
            task,
            "algorithm.use_kl_in_reward=true",
            "algorithm.filter_groups.enable=true",
            "algorithm.filter_groups.metric=ref_log_prob",
            "trainer.total_training_steps=1",
        )
    keys = re.search(r"its keys: ([^)]*)\)", str(caught.value))
    assert keys is not None
    names = set(keys.group(1).split(", "))
    assert "token_level_scores" in names
    assert not names & {"ref_log_prob", "old_log_probs", "token_level_rewards"}
