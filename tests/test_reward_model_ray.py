"""A tiny discriminative reward model plus a rule scorer trains under the Ray executor, the reward model on a
resource pool of its own (``reward_model.enable_resource_pool``): one actor rank and one reward-model rank."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from rlcore_testkit.runs import make_tiny_task, tiny_run  # noqa: E402
from rlcore_testkit.tiny import make_tiny_reward_model_dir  # noqa: E402

from rlcore.config import ConfigError, load_config  # noqa: E402
from rlcore.controller.placement import POOL_REWARD, pool_layouts  # noqa: E402
from rlcore.tracking.sinks import read_metrics  # noqa: E402


def test_reward_model_on_ray_workers(tmp_path: Path, tiny_model_dir: Path) -> None:
    rm_dir = make_tiny_reward_model_dir(tmp_path / "rm")
    task = make_tiny_task(tmp_path / "task", train_rows=8, test_rows=2)
    last, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "reward_model.enable=true",
        f"reward_model.model.path={rm_dir}",
        "trainer.executor=ray",
        "trainer.n_gpus_per_node=1",
        "reward_model.enable_resource_pool=true",
        "reward_model.n_gpus_per_node=1",
    )
    assert not ray.is_initialized()
    rows = [row for row in read_metrics(run_dir / "metrics.jsonl") if "training/global_step" in row]
    assert [row["training/global_step"] for row in rows] == [1, 2]
    for row in rows:
        assert row["critic/score/mean"] == pytest.approx(row["reward/rule_score_mean"] + row["reward/rm_score_mean"])
        assert row["reward/rm_score_mean"] != 0
        assert row["timing_worker_s/compute_rm_score"] > 0  # measured inside the reward-model actors
    assert np.isfinite(last["actor/pg_loss"])


def test_the_reward_pool_is_checked() -> None:
    config = load_config([], ["trainer.executor=ray", "reward_model.enable_resource_pool=true"], [])
    config.reward_model.n_gpus_per_node = 3
    assert pool_layouts(config, use_gpu=False)[POOL_REWARD].world_size == 3
    local = load_config([], ["trainer.executor=local", "reward_model.enable_resource_pool=true"], [])
    with pytest.raises(ConfigError, match="enable_resource_pool=true .* needs trainer.executor=ray"):
        pool_layouts(local, use_gpu=False)
    other_nodes = load_config([], ["trainer.executor=ray", "reward_model.enable_resource_pool=true"], [])
    other_nodes.reward_model.nnodes = 2
    with pytest.raises(ConfigError, match="reward_model.nnodes=2: rlcore places every pool on the same nodes"):
        pool_layouts(other_nodes, use_gpu=False)
