"""A real tiny run of verl's fully-async settings on rlcore: ``--config-name fully_async_ppo_trainer`` (verl's
``async_training`` defaults, ``partial_rollout=True`` among them) with the script-style keys verl's fully-async
scripts pass: the rollout's own pool (``rollout.nnodes``/``n_gpus_per_node``), ``data.train_batch_size=0`` sized by
``trigger_parameter_sync_step`` × ``require_batches`` mini-batches, ``rollout.total_rollout_steps`` bounding the run,
``actor_rollout_ref.hybrid_engine=False``. One trainer and one rollout Ray worker process on split placement.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from rlcore_testkit.runs import make_tiny_task, tiny_overrides  # noqa: E402

from rlcore.api import run_training  # noqa: E402
from rlcore.tracking.sinks import read_metrics  # noqa: E402

OFF = "training/off_policy"
#: the token cap of each batch of 4 prompts (data in file order): b1 ends in the first round, b2 spans four
CAPS = (2, 8)
#: verl's fully-async script keys at tiny sizes: 2 mini-batches of 2 prompts per step (train_batch_size=0 becomes
#: 1 × 2 × 2 = 4), one batch issued ahead (staleness_threshold=1), 8 prompts in all (2 steps of the 6 the 24
#: prompts make), responses to their caps (ignore_eos) in partial-rollout chunks of 8 / 4 = 2 tokens
FULLY_ASYNC = (
    "trainer.nnodes=1",
    "trainer.n_gpus_per_node=1",
    "rollout.nnodes=1",
    "rollout.n_gpus_per_node=1",
    "rollout.total_rollout_steps=8",
    "trainer.total_training_steps=null",
    "actor_rollout_ref.hybrid_engine=False",
    "data.train_batch_size=0",
    "async_training.trigger_parameter_sync_step=1",
    "async_training.require_batches=2",
    "async_training.staleness_threshold=1",
    "actor_rollout_ref.rollout.ignore_eos=true",
    "data.shuffle=false",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
    "trainer.save_freq=-1",
)


@pytest.fixture(scope="module")
def run(warm_ray: None, tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict[str, Any]:
    """The run's metric records by step (on the test process's shared Ray, with warm workers)."""
    tmp = tmp_path_factory.mktemp("fully_async")
    task = make_tiny_task(tmp / "task", caps=CAPS)
    overrides = [*tiny_overrides(tmp, tiny_model_dir, task), *FULLY_ASYNC]
    run_training([], overrides, [], config_name="fully_async_ppo_trainer")
    (run_dir,) = (tmp / "runs").glob("*/*")
    return {row["step"]: row for row in read_metrics(run_dir / "metrics.jsonl")}


def test_the_run_trains_the_steps_total_rollout_steps_allows(run: dict[int, dict[str, Any]]) -> None:
    assert sorted(run) == [1, 2]


def test_partial_rollout_carries_responses_across_the_weight_sync(run: dict[int, dict[str, Any]]) -> None:
    """Step 1 trains b1 (one round, the initial weights); b2 was issued ahead: three of its 2-token rounds ran
    under the initial weights (the first with b1, two while the trainer trained: rounds_ahead=2), its last under
    step 1's, so step 2 trains responses that span two versions, as verl's resumed partial rollouts do."""
    assert run[1][f"{OFF}/trajectory_spans/max"] == 1.0
    assert run[2][f"{OFF}/trajectory_spans/max"] == 2.0
    assert run[2][f"{OFF}/crossed_version_fraction"] > 0
