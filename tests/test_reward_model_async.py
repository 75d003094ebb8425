"""``reward_model.launch_reward_fn_async``: scoring overlaps the log-prob stages, and the metrics show it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from rlcore_testkit.runs import make_tiny_task, tiny_run
from rlcore_testkit.tiny import make_tiny_reward_model_dir

from rlcore.api.batch import Batch
from rlcore.reward.async_reward import AsyncReward
from rlcore.tracking.sinks import read_metrics

SLOW_REWARD = '''
import time


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """A rule score that takes a while (as a code or judge reward does)."""
    time.sleep(0.15)
    return float(len(solution_str) % 3)
'''


def test_overlap_metrics_are_what_the_clock_says() -> None:
    batch = Batch.from_dict({"x": [1, 2]})
    rewards = AsyncReward()
    try:
        pending = rewards.submit(lambda b: (time.sleep(0.3), len(b))[1], batch)
        time.sleep(0.2)  # the controller's other stages
        batch["y"] = [3, 4]  # the controller adds keys meanwhile; the reward sees its own copy
        metrics: dict[str, float] = {}
        assert pending.result(metrics) == 2
    finally:
        rewards.shutdown()
    assert metrics["timing_s/reward_compute"] == pytest.approx(0.3, abs=0.08)
    assert metrics["timing_s/reward_wait"] == pytest.approx(0.1, abs=0.08)
    assert metrics["timing_s/reward_overlap"] == pytest.approx(0.2, abs=0.08)  # what ran before the wait began
    assert metrics["timing_s/reward_overlap"] == pytest.approx(
        metrics["timing_s/reward_compute"] - metrics["timing_s/reward_wait"], abs=0.01
    )
    assert 0.4 < metrics["perf/reward_overlap_share"] <= 1


def test_a_failing_reward_raises_when_its_result_is_taken() -> None:
    rewards = AsyncReward()
    try:
        pending = rewards.submit(lambda b: 1 / 0, Batch.from_dict({"x": [1]}))
        with pytest.raises(ZeroDivisionError):
            pending.result({})
    finally:
        rewards.shutdown()


def test_async_reward_with_a_reward_model_overlaps_the_log_prob_stages(tmp_path: Path, tiny_model_dir: Path) -> None:
    rm_dir = make_tiny_reward_model_dir(tmp_path / "rm")
    task = make_tiny_task(tmp_path / "task", train_rows=8, test_rows=2)
    (tmp_path / "slow.py").write_text(SLOW_REWARD)
    _, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.use_kl_loss=true",
        f"custom_reward_function.path={tmp_path / 'slow.py'}",
        "reward_model.launch_reward_fn_async=true",
        "reward_model.scorer_workers=2",
        "reward_model.enable=true",
        f"reward_model.model.path={rm_dir}",
    )
    rows = [row for row in read_metrics(run_dir / "metrics.jsonl") if "training/global_step" in row]
    assert len(rows) == 2
    # the log-prob stages that hide the scoring take tens of milliseconds: on a loaded machine the reward
    # thread may be scheduled only after one step's controller already waits, but not in every step
    assert max(row["timing_s/reward_overlap"] for row in rows) > 0
    for row in rows:
        # 16 responses x 0.15 s on 2 scorer processes: at least 1.2 s of scoring, partly hidden
        assert row["timing_s/reward_compute"] >= 1.2
        # what was not hidden was waited for (more when the thread started late on a loaded machine)
        assert 0 <= row["timing_s/reward_overlap"] <= row["timing_s/reward_compute"]
        assert row["timing_s/reward_wait"] >= row["timing_s/reward_compute"] - row["timing_s/reward_overlap"] - 1e-3
        assert row["timing_s/reward"] >= row["timing_s/reward_wait"]
        assert row["critic/score/mean"] == pytest.approx(row["reward/rule_score_mean"] + row["reward/rm_score_mean"])
