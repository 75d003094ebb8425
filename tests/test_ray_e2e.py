"""GRPO end to end on two Ray worker processes, through ``rlcore run``'s own code path.

``trainer.executor=ray`` with ``trainer.n_gpus_per_node=2`` and no ``trainer.ray_address``: the run starts a
local Ray itself, places two FSDP2 ranks (gloo) with the rollout and the reference model colocated, and
shuts Ray down again when it ends.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from rlcore_testkit.runs import make_tiny_task, tiny_run  # noqa: E402

from rlcore.config import ConfigError, load_config  # noqa: E402
from rlcore.controller.placement import ensure_ray  # noqa: E402
from rlcore.errors import RLCoreError  # noqa: E402
from rlcore.tracking.sinks import read_metrics  # noqa: E402


def test_grpo_on_two_ray_worker_processes(tmp_path: Path, tiny_model_dir: Path) -> None:
    assert not ray.is_initialized()
    task = make_tiny_task(tmp_path / "task")
    last, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "trainer.executor=ray",
        "trainer.n_gpus_per_node=2",
    )
    assert not ray.is_initialized(), "the Ray the run started is shut down with it"
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [row["training/global_step"] for row in rows if "training/global_step" in row] == [1, 2]
    assert np.isfinite(last["actor/pg_loss"]) and np.isfinite(last["actor/kl_loss"])
    assert last["rollout/weight_checksum_diff"] <= 1e-6
    assert any(key.startswith("val-core/") for key in last)
    # worker time is measured inside the actors; the rest of the step is dispatch and data movement
    assert 0 < last["timing_worker_s/update_actor"] < last["timing_s/update_actor"]
    assert 0 <= last["perf/outside_worker_share"] < 1


def test_more_than_one_node_needs_a_cluster_address() -> None:
    config = load_config([], ["trainer.executor=ray", "trainer.nnodes=2"], [])
    with pytest.raises(ConfigError, match="trainer.nnodes=2 needs a Ray cluster: .*trainer.ray_address"):
        ensure_ray(config)
    assert not ray.is_initialized()


def test_an_unreachable_cluster_address_fails_fast() -> None:
    config = load_config([], ["trainer.executor=ray", "trainer.ray_address=127.0.0.1:1"], [])
    start = time.perf_counter()
    with pytest.raises(RLCoreError, match=r"trainer.ray_address='127.0.0.1:1': cannot attach .*`ray start --head`"):
        ensure_ray(config)
    assert time.perf_counter() - start < 10
    assert not ray.is_initialized()
