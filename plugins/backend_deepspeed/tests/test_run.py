"""``rlcore run`` with ``strategy=deepspeed``: the tiny task trains with actor, reference and critic on
DeepSpeed ZeRO-2, exports the actor as a Hugging Face model, and 4 steps equal 2 steps + resume + 2 steps,
metric for metric."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.tracking.sinks import read_metrics

#: GAE (a DeepSpeed critic), the in-reward KL (a DeepSpeed reference), shuffled updates and LR warm-up: all
#: the state a resume must restore; two steps per epoch
SETTINGS = (
    "actor_rollout_ref.actor.strategy=deepspeed",
    "algorithm.adv_estimator=gae",
    "critic.ppo_micro_batch_size_per_gpu=4",
    "critic.optim.lr=1e-3",
    "algorithm.use_kl_in_reward=true",
    "actor_rollout_ref.actor.shuffle=true",
    "actor_rollout_ref.actor.optim.lr_warmup_steps=3",
    "trainer.total_training_steps=4",
    "trainer.test_freq=2",
    "trainer.save_freq=2",
)
VOLATILE_PREFIXES = ("timing_s/", "timing_worker_s/", "timing_per_token_ms/", "perf/", "actor/weight_sync_s")


def comparable(run_dir: Path) -> dict[int, dict[str, Any]]:
    """The run's metric records by step, without timings."""
    rows = read_metrics(run_dir)
    return {row["step"]: {k: v for k, v in row.items() if not k.startswith(VOLATILE_PREFIXES)} for row in rows}


def test_four_steps_equal_two_plus_resume_plus_two(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The uninterrupted run reports the critic's and actor's metrics and saves DeepSpeed checkpoints and a
    loadable Hugging Face export; the run resumed from step 2 repeats steps 3-4 exactly."""
    from transformers import AutoModelForCausalLM

    task = make_tiny_task(tmp_path / "task", train_rows=8)
    _, run_dir = tiny_run(tmp_path / "full", tiny_model_dir, task, *SETTINGS)
    full = comparable(run_dir)
    assert sorted(step for step in full if step > 0) == [1, 2, 3, 4]
    for key in ("actor/pg_loss", "critic/vf_loss", "actor/grad_norm", "critic/grad_norm"):
        assert math.isfinite(full[4][key]), key
    checkpoint = tmp_path / "full" / "ckpt" / "global_step_2"
    assert (checkpoint / "actor" / "model" / "model.safetensors").is_file()
    assert (checkpoint / "actor" / "deepspeed" / "state").is_dir()
    assert AutoModelForCausalLM.from_pretrained(checkpoint / "actor" / "huggingface").num_parameters() > 0
    _, resumed_dir = tiny_run(
        tmp_path / "resumed",
        tiny_model_dir,
        task,
        *SETTINGS,
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={checkpoint}",
    )
    resumed = comparable(resumed_dir)
    assert list(resumed) == [3, 4]
    for step, metrics in resumed.items():
        assert metrics == pytest.approx(full[step], rel=0, abs=0), f"step {step} differs"
