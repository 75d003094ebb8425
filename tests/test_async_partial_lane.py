"""Partial rollout in ``separate_async``'s rollout lane (``trainer.v1.partial_rollout_tokens`` with
``trainer.v1.separate_async.rounds_ahead``) in real tiny runs on split placement with Ray worker processes: the
weights of step N load after round r_N + rounds_ahead whatever the lanes' speeds, so two runs at one seed are equal
metric for metric; a long response spans three versions; every token's recorded log-prob is its own version's;
a stop → resume with partial rows and a round ahead in flight equals the uninterrupted run; groups beyond the
bound are refilled into the next round; and with nothing ahead and the on-policy bound the run equals ``sync``.

Timeline of :data:`LANE` (batches b1, b2, b3 of 4 prompts capped at :data:`CAPS` tokens, 2-token chunks, all
three issued at step 1, one round ahead):

| round | weights | what ends | step |
|---|---|---|---|
| 1 | v0 | b1 (2 tokens) | step 1 trains b1 → v1 |
| 2 (ahead) | v0 | b2 (4 tokens); b3 at 4 | |
| 3 (ahead) | v1 | b3 at 6 | step 2 trains b2 → v2 |
| 4, 5, 6 | v2 | b3 (12 tokens: 4 of v0, 2 of v1, 6 of v2) | step 3 trains b3 |
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

ray = pytest.importorskip("ray")

from rlcore_testkit.runs import comparable, make_tiny_task, teacher_forced, tiny_run  # noqa: E402

from rlcore.controller.off_policy import STATE_FILE  # noqa: E402
from rlcore.tracking.sinks import read_metrics  # noqa: E402

OFF = "training/off_policy"
#: the token cap of each batch of 4 prompts (data in file order)
CAPS = (2, 4, 12)
#: one trainer and one rollout process, the engine's log-probs, responses to their caps
SPLIT = (
    "trainer.executor=ray",
    "trainer.placement=split",
    "trainer.n_gpus_per_node=1",
    "trainer.rollout_n_gpus_per_node=1",
    "actor_rollout_ref.rollout.calculate_log_probs=true",
    "actor_rollout_ref.rollout.ignore_eos=true",
    "data.max_response_length=12",
    "data.shuffle=false",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
)
#: separate_async in 2-token rounds, two batches issued ahead, one round ahead; three steps, saving every one
LANE = (
    *SPLIT,
    "trainer.v1.trainer_mode=separate_async",
    "trainer.v1.separate_async.parameter_sync_step=2",
    "trainer.v1.partial_rollout_tokens=2",
    "trainer.v1.separate_async.num_warmup_batches=2",
    "trainer.v1.separate_async.rounds_ahead=1",
    "trainer.total_training_steps=3",
    "trainer.save_freq=1",
)


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny task with per-row token caps by batch of 4 prompts (:data:`CAPS`, then 2)."""
    return make_tiny_task(tmp_path_factory.mktemp("task"), caps=CAPS)


@pytest.fixture(scope="module")
def one_ray(warm_ray: None) -> None:
    """The test process's shared local Ray with warm workers (the test kit's ``warm_ray``): each run attaches to it
    and takes over the worker processes the last run left idle, so the equality tests below also compare reused
    processes with new ones."""


def lane_run(tmp: Path, model: Path, task: dict[str, Path], *extra: str) -> tuple[Path, list[dict[str, Any]]]:
    """A run of :data:`LANE` (plus ``extra``) in ``tmp``: its run directory and metric records."""
    _, run_dir = tiny_run(tmp, model, task, *LANE, *extra)
    return run_dir, read_metrics(run_dir / "metrics.jsonl")


@pytest.fixture(scope="module")
def full(one_ray: None, tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, task: dict[str, Path]) -> Path:
    """Three uninterrupted steps of :data:`LANE`; returns the folder holding ``runs/`` and ``ckpt/``."""
    tmp = tmp_path_factory.mktemp("full")
    lane_run(tmp, tiny_model_dir, task)
    return tmp


def full_rows(full: Path) -> list[dict[str, Any]]:
    """The metric records of the :func:`full` run."""
    (run_dir,) = (full / "runs").glob("*/*")
    return read_metrics(run_dir / "metrics.jsonl")


def test_a_long_response_spans_the_versions_its_rounds_ran_under(full: Path) -> None:
    """Step 1 trains b1 (version 0); step 2 b2 (version 0, ended in the round run ahead); step 3 b3 (4 tokens
    of version 0, 2 of version 1, 6 of version 2)."""
    rows = {row["step"]: row for row in full_rows(full)}
    assert [rows[s][f"{OFF}/trajectory_spans/max"] for s in (1, 2, 3)] == [1.0, 1.0, 3.0]
    assert [rows[s][f"{OFF}/crossed_version_fraction"] for s in (1, 2, 3)] == [0.0, 0.0, 1.0]
    assert [rows[s][f"{OFF}/trajectory_staleness_worst/max"] for s in (1, 2, 3)] == [0.0, 1.0, 2.0]
    assert rows[3][f"{OFF}/token_staleness"] == pytest.approx((4 * 2 + 2 * 1) / 12)


def test_the_checkpoints_hold_the_partial_rows_and_the_rounds_ahead(full: Path) -> None:
    """After step 1: b3 four tokens in (version 0) and the round ahead that finished b2; after step 2: b3 six
    tokens in (two of version 1) and an empty round ahead; the lane had loaded each step's weights."""
    first = pickle.loads((full / "ckpt" / "global_step_1" / STATE_FILE).read_bytes())
    assert (first.version, first.served) == (1, 1) and first.in_flight == []
    assert [len(done) for done in first.rounds] == [1] and first.rounds[0][0].version == 0
    assert len(first.partial) == 1 and first.partial[0].rows["response_mask"].sum(-1).tolist() == [4] * 16
    second = pickle.loads((full / "ckpt" / "global_step_2" / STATE_FILE).read_bytes())
    assert (second.version, second.served) == (2, 2) and second.rounds == [[]]
    rows = second.partial[0].rows
    assert not rows["finished"].any() and (rows["row_seeds"] >= 0).all()
    assert rows["rollout_versions"][:, :6].tolist() == [[0, 0, 0, 0, 1, 1]] * 16


def test_two_runs_at_one_seed_are_equal(
    full: Path, tiny_model_dir: Path, task: dict[str, Path], tmp_path: Path
) -> None:
    """The lanes' relative speed does not move a weight load: a second run equals the first metric for metric."""
    _, rows = lane_run(tmp_path, tiny_model_dir, task, "trainer.save_freq=-1")
    assert comparable(rows) == comparable(full_rows(full))


def test_resume_with_partial_rows_and_a_round_ahead_equals_the_uninterrupted_run(
    full: Path, tiny_model_dir: Path, task: dict[str, Path], tmp_path: Path
) -> None:
    """The checkpoint of step 1 holds b3 partial and b2 finished in the round ahead: steps 2 and 3 after the
    resume match the uninterrupted run metric for metric."""
    _, rows = lane_run(
        tmp_path,
        tiny_model_dir,
        task,
        "trainer.save_freq=-1",
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={full / 'ckpt' / 'global_step_1'}",
    )
    got, expected = comparable(rows), comparable(full_rows(full))
    assert list(got) == [2, 3]
    for step in (2, 3):
        assert got[step] == expected[step], f"step {step} differs"


def test_each_token_log_prob_is_its_versions(full: Path, tiny_model_dir: Path) -> None:
    """b3's tokens in the step-2 checkpoint: the first four were sampled by version 0 (the initial model), the
    next two by version 1 (the actor after step 1: the Hugging Face export in the same run's step-1 checkpoint,
    ``actor.checkpoint.save_contents`` having ``hf_model``); each recorded log-prob equals its version's
    teacher-forced log-prob."""
    rows = pickle.loads((full / "ckpt" / "global_step_2" / STATE_FILE).read_bytes()).partial[0].rows
    recorded = rows["rollout_log_probs"][:, :6]
    v0 = teacher_forced(tiny_model_dir, rows, 6)
    v1 = teacher_forced(full / "ckpt" / "global_step_1" / "actor" / "huggingface", rows, 6)
    torch.testing.assert_close(recorded[:, :4], v0[:, :4], atol=1e-4, rtol=0)
    torch.testing.assert_close(recorded[:, 4:], v1[:, 4:], atol=1e-4, rtol=0)
    assert not torch.allclose(v0[:, 4:], v1[:, 4:], atol=1e-3), "the update did not change the policy"


def test_on_policy_rounds_equal_sync(
    one_ray: None, tiny_model_dir: Path, task: dict[str, Path], tmp_path: Path
) -> None:
    """Nothing issued ahead and the on-policy bound: each step's rounds run under its own version (the rounds
    ahead find nothing in flight), so the run equals the synchronous split run metric for metric, apart from the
    weight transfer's bookkeeping (as for whole responses: tests/test_off_policy.py) and the HF engine's
    generate-loop figures that ``generate_partial`` does not report."""
    steps = ("trainer.total_training_steps=2",)
    _, sync_dir = tiny_run(tmp_path / "sync", tiny_model_dir, task, *SPLIT, *steps)
    _, rows = lane_run(
        tmp_path / "lane",
        tiny_model_dir,
        task,
        *steps,
        "trainer.save_freq=-1",
        "trainer.v1.separate_async.num_warmup_batches=0",
        "trainer.v1.sampler.max_off_policy_threshold=1",
    )
    assert [row[f"{OFF}/trajectory_staleness_worst/max"] for row in rows] == [0.0, 0.0]
    drop = (
        "training/off_policy/",
        "async_training/",
        "rollout/weight_checksum_diff",
        "rollout/weight_version",
        "actor/weight_sync_buckets",
        "rollout/rows_per_chunk",
        "rollout/graph_step_share",
    )
    assert comparable(rows, drop) == comparable(read_metrics(sync_dir / "metrics.jsonl"), drop)


def test_groups_beyond_the_bound_are_refilled_into_the_rounds(
    one_ray: None, tiny_model_dir: Path, task: dict[str, Path], tmp_path: Path
) -> None:
    """A bound of 2 versions: b3 (issued at version 0) ends in round 6 and would train at version 2, so its 4
    groups are evicted and 4 fresh prompts (2-token caps) are issued at version 2; they join the next round
    (7) and step 3 trains them on-policy."""
    _, rows = lane_run(
        tmp_path, tiny_model_dir, task, "trainer.save_freq=-1", "trainer.v1.sampler.max_off_policy_threshold=2"
    )
    assert [row.get(f"{OFF}/evicted_samples", 0.0) for row in rows] == [0.0, 0.0, 4.0]
    assert [row[f"{OFF}/trajectory_staleness_worst/max"] for row in rows] == [0.0, 1.0, 0.0]
    assert [row[f"{OFF}/trajectory_spans/max"] for row in rows] == [1.0, 1.0, 1.0]
    assert rows[2]["response_length/max"] == 2.0
