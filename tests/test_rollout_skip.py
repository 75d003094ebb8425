"""verl's ``skip.rollout`` (RolloutSkip): a run dumps the listed steps' generations, a later run replays them
instead of generating; real tiny runs on the HF engine."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from rlcore_testkit.runs import dry_run, make_tiny_task, tiny_overrides, tiny_run

from rlcore.tracking.sinks import read_metrics

#: metrics that differ between identical runs (timings, throughput, memory)
VOLATILE_PREFIXES = ("timing_s/", "timing_worker_s/", "timing_per_token_ms/", "perf/", "actor/weight_sync_s", "memory/")


@pytest.fixture(scope="module")
def tiny_task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny task's files, shared by the module's runs."""
    return make_tiny_task(tmp_path_factory.mktemp("task"))


def _rows(tmp: Path, model: Path, task: dict[str, Path], dump: Path, *extra: str) -> dict[int, dict[str, Any]]:
    """The run's training metrics by step, without the volatile ones."""
    _, run_dir = tiny_run(
        tmp,
        model,
        task,
        "trainer.total_training_steps=3",
        "trainer.test_freq=0",
        "skip.rollout.enable=true",
        "skip.rollout.steps=[1,2]",
        f"skip.rollout.dump_dir={dump}",
        *extra,
    )
    rows = read_metrics(run_dir / "metrics.jsonl")
    return {row["step"]: {k: v for k, v in row.items() if not k.startswith(VOLATILE_PREFIXES)} for row in rows}


def test_second_run_replays_the_dumped_steps(tmp_path: Path, tiny_model_dir: Path, tiny_task: dict[str, Path]) -> None:
    """Run 1 dumps steps 1 and 2 (verl's layout); run 2, with another rollout seed, replays them: the same
    metrics for those steps, training ones included (the same responses from the same weights). Without the
    dumps that seed samples other responses."""
    dump = tmp_path / "dump"
    first = _rows(tmp_path / "a", tiny_model_dir, tiny_task, dump)
    project = dump / "run_rlcore" / "GBS4_N4_in32_out8"
    assert sorted(p.name for p in project.iterdir()) == ["1", "2"]  # step 3 is not listed: never dumped
    assert (project / "1" / "gen_batch.dp").is_file() and (project / "1" / "meta.json").is_file()
    second = _rows(tmp_path / "b", tiny_model_dir, tiny_task, dump, "actor_rollout_ref.rollout.seed=7")
    baseline = _rows(tmp_path / "c", tiny_model_dir, tiny_task, tmp_path / "other", "actor_rollout_ref.rollout.seed=7")
    assert second[1] == first[1] and second[2] == first[2]
    assert baseline[1]["actor/entropy"] != first[1]["actor/entropy"]


def test_repeat_replays_the_nearest_earlier_step(
    tmp_path: Path, tiny_model_dir: Path, tiny_task: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """action=repeat: a listed step without its own dump replays the nearest earlier step's (and dumps nothing)."""
    dump = tmp_path / "dump"
    first = _rows(tmp_path / "a", tiny_model_dir, tiny_task, dump, "skip.rollout.steps=[1]")
    with caplog.at_level(logging.INFO, logger="rlcore.controller.rollout_skip"):
        second = _rows(tmp_path / "b", tiny_model_dir, tiny_task, dump, "skip.rollout.action=repeat")
    assert "step 2 round 1 loads the generation dumped at step 1" in caplog.text
    assert [p.name for p in (dump / "run_rlcore" / "GBS4_N4_in32_out8").iterdir()] == ["1"]
    assert second[1] == first[1]
    assert second[2]["actor/entropy"] != first[2]["actor/entropy"]  # step 1's responses under step 2's weights


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("skip.rollout.action=replay",), "skip.rollout.action='replay': use one of cache, repeat"),
        (("skip.rollout.steps=[0,2]",), "skip.rollout.steps: training steps are integers from 1, got [0]"),
        (("async_training.enable=true",), "verl's skip.async_rollout (by sample) is not in rlcore"),
    ],
    ids=["action", "steps", "async"],
)
def test_bad_settings_are_named_before_the_run(
    extra: tuple[str, ...], message: str, tmp_path: Path, tiny_model_dir: Path, tiny_task: dict[str, Path]
) -> None:
    """Settings the cache cannot honour are one line each in the dry run."""
    result = dry_run(*tiny_overrides(tmp_path, tiny_model_dir, tiny_task), "skip.rollout.enable=true", *extra)
    assert result.exit_code != 0
    assert message in result.output
