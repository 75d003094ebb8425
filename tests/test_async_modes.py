"""verl's V1 ``colocate_async`` mode in real tiny runs (local workers, real torch, real files): on-policy it
equals the synchronous loop metric for metric, a stop and resume equals the uninterrupted run, and the staleness
bound holds with ``drop`` (stale groups evicted and refilled, the batch size kept) and ``wait`` (nothing
evicted). ``separate_async`` (the rollout lane, on Ray) is in tests/test_off_policy.py."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from rlcore_testkit.runs import comparable, make_tiny_task, tiny_run

from rlcore.controller.off_policy import STATE_FILE
from rlcore.tracking.sinks import read_metrics

#: the engine's log-probs (an async run needs them; the synchronous run gets them too, to be comparable)
COMMON = (
    "actor_rollout_ref.rollout.calculate_log_probs=true",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
)
COLOCATE = ("trainer.v1.trainer_mode=colocate_async", *COMMON)
#: what only an asynchronous run reports
ASYNC_ONLY = ("training/off_policy/", "async_training/")
OFF = "training/off_policy"


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_tiny_task(tmp_path_factory.mktemp("task"))


def run(tmp: Path, model: Path, task: dict[str, Path], *extra: str) -> list[dict[str, Any]]:
    _, run_dir = tiny_run(tmp, model, task, *extra)
    return read_metrics(run_dir / "metrics.jsonl")


def test_on_policy_colocate_async_equals_sync(tiny_model_dir: Path, task: dict[str, Path], tmp_path: Path) -> None:
    """``max_off_policy_threshold=1`` (verl's on-policy bound) with no batch issued ahead: every group is
    generated and trained under the same version, exactly as the synchronous loop does."""
    steps = ("trainer.total_training_steps=3",)
    sync = run(tmp_path / "sync", tiny_model_dir, task, *COMMON, *steps)
    on_policy = run(
        tmp_path / "async",
        tiny_model_dir,
        task,
        *COLOCATE,
        *steps,
        "trainer.v1.colocate_async.num_warmup_batches=0",
        "trainer.v1.sampler.max_off_policy_threshold=1",
    )
    assert [row[f"{OFF}/trajectory_staleness_worst/max"] for row in on_policy] == [0.0, 0.0, 0.0]
    assert comparable(on_policy, ASYNC_ONLY) == comparable(sync)


@pytest.fixture(scope="module")
def colocate_full(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, task: dict[str, Path]) -> Path:
    """Four colocate_async steps with half a batch issued ahead, checkpointing after steps 2 and 4."""
    tmp = tmp_path_factory.mktemp("full")
    rows = run(
        tmp,
        tiny_model_dir,
        task,
        *COLOCATE,
        "trainer.v1.colocate_async.num_warmup_batches=0.5",
        "trainer.total_training_steps=4",
        "trainer.save_freq=2",
    )
    (tmp / "rows.json").write_text(json.dumps(rows))
    return tmp


def test_colocate_async_trains_groups_issued_ahead(colocate_full: Path) -> None:
    rows = {row["step"]: row for row in json.loads((colocate_full / "rows.json").read_text())}
    # step 1 trains the first batch (version 0); from step 2 on, two of its four groups were issued a step early
    assert [rows[s][f"{OFF}/trajectory_staleness_worst/max"] for s in (1, 2, 3, 4)] == [0.0, 1.0, 1.0, 1.0]
    assert [rows[s][f"{OFF}/trajectory_staleness_worst/min"] for s in (2, 3, 4)] == [0.0, 0.0, 0.0]
    assert rows[2][f"{OFF}/trajectory_staleness/mean"] == 0.5
    assert all(rows[s][f"{OFF}/crossed_version_fraction"] == 0.0 for s in rows), "whole responses: one version"


def test_colocate_async_resume_equals_the_uninterrupted_run(
    colocate_full: Path, tiny_model_dir: Path, task: dict[str, Path], tmp_path: Path
) -> None:
    """The checkpoint of step 2 holds the two groups issued ahead (finished) and the two prompts drawn but not
    issued; steps 3 and 4 after the resume match the uninterrupted run metric for metric."""
    checkpoint = colocate_full / "ckpt" / "global_step_2"
    saved = pickle.loads((checkpoint / STATE_FILE).read_bytes())
    assert [g.issued for g in saved.buffer["finished"]] == [1, 1] and len(saved.buffer["prompts"]) == 2
    assert saved.in_flight == [] and saved.version == 2
    resumed = run(
        tmp_path,
        tiny_model_dir,
        task,
        *COLOCATE,
        "trainer.v1.colocate_async.num_warmup_batches=0.5",
        "trainer.total_training_steps=4",
        "trainer.save_freq=2",
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={checkpoint}",
    )
    expected = comparable(json.loads((colocate_full / "rows.json").read_text()))
    got = comparable(resumed)
    assert list(got) == [3, 4]
    for step in (3, 4):
        assert got[step] == expected[step], f"step {step} differs"


def dumped_rows(folder: Path) -> dict[int, int]:
    """Responses per step in ``trainer.rollout_data_dir``."""
    return {int(f.stem): len(f.read_text().splitlines()) for f in folder.glob("*.jsonl")}


@pytest.mark.parametrize("strategy", ["drop", "wait"])
def test_the_bound_with_batches_issued_far_ahead(
    strategy: str, tiny_model_dir: Path, task: dict[str, Path], tmp_path: Path
) -> None:
    """Four steps' batches issued at version 0 (three ahead) and a bound of 2 versions: at step 3 (version 2)
    the groups of batches 3 and 4 span 3. ``drop`` evicts all eight, refills eight fresh prompts at version 2 and
    trains four of them at step 3, the other four at step 4; ``wait`` evicts nothing and trains them (verl: wait
    only holds for groups in flight). Every step trains 4 groups × 4 responses."""
    dump = tmp_path / "dump"
    rows = run(
        tmp_path,
        tiny_model_dir,
        task,
        *COLOCATE,
        "trainer.v1.colocate_async.num_warmup_batches=3",
        "trainer.v1.sampler.max_off_policy_threshold=2",
        f"trainer.v1.sampler.max_off_policy_strategy={strategy}",
        "trainer.total_training_steps=4",
        f"trainer.rollout_data_dir={dump}",
    )
    worst = [row[f"{OFF}/trajectory_staleness_worst/max"] for row in rows]
    evicted = [row.get(f"{OFF}/evicted_samples", 0.0) for row in rows]
    assert dumped_rows(dump) == {1: 16, 2: 16, 3: 16, 4: 16}
    if strategy == "drop":
        assert worst == [0.0, 1.0, 0.0, 1.0] and evicted == [0.0, 0.0, 8.0, 0.0]
        assert rows[2][f"{OFF}/evicted_samples_staleness/min"] == 3.0
        assert all(w + 1 <= 2 for w in worst), "never beyond the bound"
    else:
        assert worst == [0.0, 1.0, 2.0, 3.0] and evicted == [0.0] * 4
