"""``rlcore run`` with ``strategy=megatron``: the tiny task trains with actor, reference and critic on the
Megatron engine, and 6 steps equal 3 steps + resume + 3 steps, metric for metric."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.tracking.sinks import read_metrics

#: GAE (a Megatron critic), the in-reward KL (a Megatron reference), shuffled updates and LR warm-up: all the
#: state a resume must restore; three steps per epoch
SETTINGS = (
    "actor_rollout_ref.actor.strategy=megatron",
    "algorithm.adv_estimator=gae",
    "critic.ppo_micro_batch_size_per_gpu=4",
    "critic.optim.lr=1e-3",
    "algorithm.use_kl_in_reward=true",
    "actor_rollout_ref.actor.shuffle=true",
    "actor_rollout_ref.actor.optim.lr_warmup_steps=4",
    "trainer.total_training_steps=6",
    "trainer.test_freq=3",
    "trainer.save_freq=1",
)
VOLATILE_PREFIXES = ("timing_s/", "timing_worker_s/", "timing_per_token_ms/", "perf/", "actor/weight_sync_s")


def comparable(run_dir: Path) -> dict[int, dict[str, Any]]:
    """The run's metric records by step, without timings."""
    rows = read_metrics(run_dir)
    return {row["step"]: {k: v for k, v in row.items() if not k.startswith(VOLATILE_PREFIXES)} for row in rows}


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny task with an epoch of three steps."""
    return make_tiny_task(tmp_path_factory.mktemp("task"), train_rows=12)


def test_six_steps_equal_three_plus_resume_plus_three(
    tiny_model_dir: Path, task: dict[str, Path], tmp_path: Path
) -> None:
    """The uninterrupted run reports the critic's and actor's metrics; the run resumed from step 3 repeats
    steps 4-6 exactly."""
    _, run_dir = tiny_run(tmp_path / "full", tiny_model_dir, task, *SETTINGS)
    full = comparable(run_dir)
    assert sorted(step for step in full if step > 0) == [1, 2, 3, 4, 5, 6]
    for key in ("actor/pg_loss", "critic/vf_loss", "actor/grad_norm", "critic/grad_norm"):
        assert math.isfinite(full[6][key]), key
    checkpoint = tmp_path / "full" / "ckpt" / "global_step_3"
    assert (checkpoint / "actor" / "model" / "tp00_pp00.pt").is_file()
    _, resumed_dir = tiny_run(
        tmp_path / "resumed",
        tiny_model_dir,
        task,
        *SETTINGS,
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={checkpoint}",
    )
    resumed = comparable(resumed_dir)
    assert list(resumed) == [4, 5, 6]
    for step, metrics in resumed.items():
        assert metrics == full[step], f"step {step} differs"


def test_grpo_on_a_moe_model_with_expert_parallelism(warm_ray: None, tmp_path: Path, task: dict[str, Path]) -> None:
    """``rlcore run``: a tiny Qwen3-MoE trains 2 GRPO steps on two Ray worker processes with
    ``expert_model_parallel_size=2`` (each rank holds 4 of the 8 experts; the HF rollout is synced from the
    gathered weights), logging the MoE metrics."""
    pytest.importorskip("ray")
    from rlcore_testkit.tiny import make_tiny_moe_model_dir

    model_dir = make_tiny_moe_model_dir(tmp_path / "moe")
    last, run_dir = tiny_run(
        tmp_path / "run",
        model_dir,
        task,
        "actor_rollout_ref.actor.strategy=megatron",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.megatron.expert_model_parallel_size=2",
        "actor_rollout_ref.ref.megatron.expert_model_parallel_size=2",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "trainer.executor=ray",
        "trainer.n_gpus_per_node=2",
    )
    steps = [row["training/global_step"] for row in read_metrics(run_dir) if "training/global_step" in row]
    assert steps == [1, 2]
    for key in ("actor/moe_aux_loss", "actor/moe_load_max_over_mean", "actor/pg_loss", "actor/kl_loss"):
        assert math.isfinite(last[key]), key
    assert last["actor/moe_load_max_over_mean"] >= 1.0
    assert last["rollout/weight_checksum_diff"] <= 1e-6
