"""Partial rollout inside ``colocate_async`` (``trainer.v1.partial_rollout_tokens``) in real tiny runs (local
workers, real torch, real files): a generation left unfinished when the step has its batch continues after the
weight sync under the new weights, so its responses span two versions; every token's recorded log-prob is the
log-prob of the version that sampled it; the bound holds; and a stop → resume with partial rows in flight equals
the uninterrupted run."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch
from rlcore_testkit.runs import comparable, make_tiny_task, teacher_forced, tiny_run

from rlcore.controller.off_policy import STATE_FILE
from rlcore.tracking.sinks import read_metrics

OFF = "training/off_policy"
#: the token cap of each batch of 4 prompts (data in file order): batch 1 ends after one 2-token chunk, batch 2
#: after two, batch 3 after six; all three are issued at step 1 (two batches ahead)
CAPS = (2, 4, 12)
PARTIAL = (
    "trainer.v1.trainer_mode=colocate_async",
    "trainer.v1.partial_rollout_tokens=2",
    "trainer.v1.colocate_async.num_warmup_batches=2",
    "actor_rollout_ref.rollout.calculate_log_probs=true",
    "actor_rollout_ref.rollout.ignore_eos=true",
    "data.max_response_length=12",
    "data.shuffle=false",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
    "trainer.total_training_steps=3",
    "trainer.save_freq=1",
)


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny task with per-row token caps by batch of 4 prompts (:data:`CAPS`, then 2)."""
    return make_tiny_task(tmp_path_factory.mktemp("task"), caps=CAPS)


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, task: dict[str, Path]) -> Path:
    """Three steps with partial rollout in 2-token chunks, checkpointing after every step."""
    tmp = tmp_path_factory.mktemp("full")
    _, run_dir = tiny_run(tmp, tiny_model_dir, task, *PARTIAL)
    (tmp / "rows.json").write_text(json.dumps(read_metrics(run_dir / "metrics.jsonl")))
    return tmp


def test_generations_left_unfinished_span_versions(full: Path) -> None:
    """Step 1 trains batch 1 (version 0); step 2 batch 2 (2 tokens of version 0, 2 of version 1); step 3 batch 3
    (2 tokens of each of versions 0 and 1, 8 of version 2)."""
    rows = {row["step"]: row for row in json.loads((full / "rows.json").read_text())}
    spans = [rows[s][f"{OFF}/trajectory_spans/max"] for s in (1, 2, 3)]
    crossed = [rows[s][f"{OFF}/crossed_version_fraction"] for s in (1, 2, 3)]
    worst = [rows[s][f"{OFF}/trajectory_staleness_worst/max"] for s in (1, 2, 3)]
    assert spans == [1.0, 2.0, 3.0] and crossed == [0.0, 1.0, 1.0] and worst == [0.0, 1.0, 2.0]
    assert rows[2][f"{OFF}/token_staleness"] == pytest.approx(2 / 4)
    assert rows[3][f"{OFF}/token_staleness"] == pytest.approx((2 * 2 + 2 * 1) / 12)
    assert all(w + 1 <= 8 for w in worst), "the bound (8 versions) holds"


def test_the_checkpoint_keeps_the_partial_rows(full: Path) -> None:
    """After step 2 the checkpoint holds batch 3 in flight: 4 tokens per row, 2 of version 0 then 2 of version 1,
    with their row seeds."""
    saved = pickle.loads((full / "ckpt" / "global_step_2" / STATE_FILE).read_bytes())
    assert saved.version == 2 and len(saved.partial) == 1 and saved.in_flight == []
    rows = saved.partial[0].rows
    assert rows["response_mask"].sum(-1).tolist() == [4] * 16
    assert not rows["finished"].any() and (rows["row_seeds"] >= 0).all()
    assert rows["rollout_versions"][:, :4].tolist() == [[0, 0, 1, 1]] * 16


def test_resume_with_partial_rows_in_flight_equals_the_uninterrupted_run(
    full: Path, tiny_model_dir: Path, task: dict[str, Path], tmp_path: Path
) -> None:
    """The checkpoint of step 1 holds batches 2 and 3 two tokens in: steps 2 and 3 after the resume (which
    continue them under versions 1 and 2) match the uninterrupted run metric for metric."""
    _, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        *PARTIAL,
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={full / 'ckpt' / 'global_step_1'}",
    )
    expected = comparable(json.loads((full / "rows.json").read_text()))
    got = comparable(read_metrics(run_dir / "metrics.jsonl"))
    assert list(got) == [2, 3]
    for step in (2, 3):
        assert got[step] == expected[step], f"step {step} differs"


def test_each_token_log_prob_is_its_versions(
    full: Path, tiny_model_dir: Path, task: dict[str, Path], tmp_path: Path
) -> None:
    """Batch 3's tokens in the step-2 checkpoint: the first two were sampled by version 0 (the initial model),
    the next two by version 1 (the actor after step 1, saved by a one-step run of the same config, which trains
    the same batch 1); each recorded log-prob equals that version's teacher-forced log-prob."""
    _, run_dir = tiny_run(
        tmp_path, tiny_model_dir, task, *PARTIAL, "trainer.total_training_steps=1", "trainer.save_final_model=true"
    )
    rows = pickle.loads((full / "ckpt" / "global_step_2" / STATE_FILE).read_bytes()).partial[0].rows
    recorded = rows["rollout_log_probs"][:, :4]
    v0 = teacher_forced(tiny_model_dir, rows, 4)
    v1 = teacher_forced(run_dir / "model", rows, 4)
    torch.testing.assert_close(recorded[:, :2], v0[:, :2], atol=1e-4, rtol=0)
    torch.testing.assert_close(recorded[:, 2:], v1[:, 2:], atol=1e-4, rtol=0)
    assert not torch.allclose(v0[:, 2:], v1[:, 2:], atol=1e-3), "the update did not change the policy"


def test_chunks_with_no_update_between_them_equal_the_synchronous_run(
    tiny_model_dir: Path, task: dict[str, Path], tmp_path: Path
) -> None:
    """Nothing issued ahead and the on-policy bound: every generation runs to its end in 2-token chunks under one
    version, which gives exactly the tokens of one ``generate`` call, so the run equals ``sync`` metric for
    metric (the engine's per-call figures summed over the chunks)."""
    common = [o for o in PARTIAL if not o.startswith(("trainer.v1.", "trainer.save_freq"))]
    sync = read_metrics(tiny_run(tmp_path / "sync", tiny_model_dir, task, *common)[1] / "metrics.jsonl")
    chunked = read_metrics(
        tiny_run(
            tmp_path / "chunked",
            tiny_model_dir,
            task,
            *PARTIAL,
            "trainer.v1.colocate_async.num_warmup_batches=0",
            "trainer.v1.sampler.max_off_policy_threshold=1",
        )[1]
        / "metrics.jsonl"
    )
    only_async = ("training/off_policy/", "async_training/")
    got = {s: {k: v for k, v in row.items() if not k.startswith(only_async)} for s, row in comparable(chunked).items()}
    # the figures of the HF engine's generate loop that generate_partial does not report
    loop_only = ("rollout/rows_per_chunk", "rollout/graph_step_share")
    want = {s: {k: v for k, v in row.items() if k not in loop_only} for s, row in comparable(sync).items()}
    assert got == want
