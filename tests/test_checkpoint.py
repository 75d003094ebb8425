"""Checkpoints that resume exactly: the atomic checkpoint manager, the resume choice, and real runs that are
interrupted (by a hook or a SIGKILL in the middle of a save) and resumed."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rlcore_testkit.runs import make_tiny_task, tiny_overrides, tiny_run

from rlcore.checkpoint import (
    CRASH_ENV,
    LATEST_FILE,
    CheckpointError,
    CheckpointManager,
    RunIdentity,
    claim_checkpoints,
    read_trainer_state,
    resume_path,
)
from rlcore.config.schema import TrainerConfig
from rlcore.controller.uids import prompt_uids
from rlcore.errors import RLCoreError
from rlcore.tracking.sinks import read_metrics


def trainer_config(root: Path, **trainer: Any) -> TrainerConfig:
    """The ``trainer`` section the checkpoint manager reads, saving into ``root``."""
    return TrainerConfig(default_local_dir=str(root), **trainer)


def write_part(folder: Path) -> None:
    """A stand-in for the workers' and controller's parts."""
    (folder / "actor").mkdir()
    (folder / "actor" / "weights.bin").write_bytes(b"\0" * 64)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 0}))


def steps_on_disk(root: Path) -> list[str]:
    """The names in ``root``, sorted."""
    return sorted(p.name for p in root.iterdir())


# ------------------------------------------------------------------ the checkpoint manager


def test_save_writes_a_temporary_folder_then_renames_it(tmp_path: Path) -> None:
    """``write_fn`` sees a ``global_step_N.tmp-*`` folder; afterwards only ``global_step_N`` and the pointer."""
    seen: list[Path] = []

    def write(folder: Path) -> None:
        seen.append(folder)
        assert not (tmp_path / "global_step_3").exists()
        write_part(folder)

    path = CheckpointManager(trainer_config(tmp_path)).save(3, write)
    assert path == tmp_path / "global_step_3"
    assert seen[0].name.startswith("global_step_3.tmp-") and not seen[0].exists()
    assert (path / "actor" / "weights.bin").is_file()
    assert steps_on_disk(tmp_path) == ["global_step_3", LATEST_FILE]
    assert (tmp_path / LATEST_FILE).read_text() == "3"


def test_a_failing_write_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    """An error inside ``write_fn`` removes the temporary folder and keeps the pointer at the last checkpoint."""
    manager = CheckpointManager(trainer_config(tmp_path))
    manager.save(1, write_part)

    def broken(folder: Path) -> None:
        write_part(folder)
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(
        CheckpointError, match=r"step 2 .*the disk is full .*previous checkpoint .*global_step_1 is intact"
    ):
        manager.save(2, broken)
    assert steps_on_disk(tmp_path) == ["global_step_1", LATEST_FILE]
    assert manager.latest() == tmp_path / "global_step_1"


def test_saving_a_step_again_replaces_it(tmp_path: Path) -> None:
    """A second save of the same step (a run restarted with resume disabled) replaces the folder."""
    manager = CheckpointManager(trainer_config(tmp_path))
    manager.save(2, write_part)
    manager.save(2, lambda folder: (folder / "second").write_text("x"))
    assert steps_on_disk(tmp_path / "global_step_2") == ["checksums.json", "second"]
    assert steps_on_disk(tmp_path) == ["global_step_2", LATEST_FILE]


def test_rotation_keeps_the_last_k(tmp_path: Path) -> None:
    """``max_actor_ckpt_to_keep=2`` keeps the two newest; the smaller of the actor and critic limits wins;
    checkpoints of later steps (another run's) are left alone."""
    manager = CheckpointManager(trainer_config(tmp_path, max_actor_ckpt_to_keep=2))
    for step in range(1, 5):
        manager.save(step, write_part)
    assert steps_on_disk(tmp_path) == ["global_step_3", "global_step_4", LATEST_FILE]

    both = CheckpointManager(trainer_config(tmp_path, max_actor_ckpt_to_keep=3, max_critic_ckpt_to_keep=1))
    both.save(5, write_part)
    assert steps_on_disk(tmp_path) == ["global_step_5", LATEST_FILE]

    (tmp_path / "global_step_9").mkdir()
    both.save(6, write_part)
    assert steps_on_disk(tmp_path) == ["global_step_6", "global_step_9", LATEST_FILE]

    CheckpointManager(trainer_config(tmp_path, max_actor_ckpt_to_keep=None)).save(7, write_part)
    assert "global_step_6" in steps_on_disk(tmp_path), "null keeps every checkpoint"
    with pytest.raises(CheckpointError, match="trainer.max_actor_ckpt_to_keep"):
        CheckpointManager(trainer_config(tmp_path, max_actor_ckpt_to_keep=-1))


def test_latest_follows_the_pointer_and_ignores_half_written_folders(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The pointer wins; a ``*.tmp-*`` folder never counts; a dangling pointer falls back with a warning."""
    manager = CheckpointManager(trainer_config(tmp_path))
    assert manager.latest() is None
    manager.save(2, write_part)
    manager.save(4, write_part)
    (tmp_path / "global_step_6.tmp-abc").mkdir()
    assert manager.latest() == tmp_path / "global_step_4"
    (tmp_path / LATEST_FILE).write_text("2")
    assert manager.latest() == tmp_path / "global_step_2", "the pointer, not the highest step, decides"
    (tmp_path / LATEST_FILE).write_text("5")
    with caplog.at_level(logging.WARNING, logger="rlcore.checkpoint.manager"):
        assert manager.latest() == tmp_path / "global_step_4"
    assert "global_step_4" in caplog.text and "'5'" in caplog.text
    (tmp_path / LATEST_FILE).unlink()
    assert manager.latest() == tmp_path / "global_step_4"


def test_resume_modes(tmp_path: Path) -> None:
    """auto finds the latest and deletes half-written folders; disable starts fresh; resume_path needs a
    ``global_step_N`` folder; errors name the key."""
    root = tmp_path / "ckpt"
    assert resume_path(trainer_config(root)) is None, "auto with nothing saved starts fresh"
    CheckpointManager(trainer_config(root)).save(3, write_part)
    (root / "global_step_4.tmp-dead").mkdir()
    assert resume_path(trainer_config(root)) == root / "global_step_3"
    assert not (root / "global_step_4.tmp-dead").exists()
    assert resume_path(trainer_config(root, resume_mode="disable")) is None
    chosen = trainer_config(root, resume_mode="resume_path", resume_from_path=str(root / "global_step_3"))
    assert resume_path(chosen) == root / "global_step_3"

    bad = {
        "trainer.resume_from_path": dict(resume_mode="resume_path", resume_from_path=str(root)),
        "no such checkpoint folder": dict(resume_mode="resume_path", resume_from_path=str(root / "global_step_7")),
        "needs trainer.resume_from_path": dict(resume_mode="resume_path"),
        "trainer.resume_mode=auto ignores it": dict(resume_from_path=str(root / "global_step_3")),
        "trainer.resume_mode must be one of": dict(resume_mode="latest"),
    }
    for message, settings in bad.items():
        with pytest.raises(CheckpointError, match=message):
            resume_path(trainer_config(root, **settings))
    with pytest.raises(CheckpointError, match="has no trainer_state.json"):
        read_trainer_state(tmp_path)


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ([1, 2], "it holds [1, 2], not a table of files"),
        ("text", 'it holds "text", not a table of files'),
        (None, "it holds null, not a table of files"),
        ({"actor/weights.bin": 64}, "its entry 'actor/weights.bin': 64 is not a file of the checkpoint"),
        ({"actor/weights.bin": {"size": 64}}, "its entry 'actor/weights.bin': {\"size\": 64} is not"),
        ({"actor/weights.bin": {"size": "64", "sha256": "0"}}, "its entry 'actor/weights.bin'"),
        ({"/etc/hostname": {"size": 1, "sha256": "0"}}, "its entry '/etc/hostname'"),
    ],
    ids=["list", "string", "null", "number-entry", "no-sha256", "text-size", "outside"],
)
def test_checksums_of_the_wrong_shape_are_a_damaged_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, table: Any, named: str
) -> None:
    """Valid JSON that is not a table of ``{"size", "sha256"}`` entries marks the checkpoint damaged: ``auto``
    falls back to the intact one with a warning naming the file, ``resume_path`` stops with one line."""
    manager = CheckpointManager(trainer_config(tmp_path))
    manager.save(1, write_part)
    manager.save(2, write_part)
    (tmp_path / "global_step_2" / "checksums.json").write_text(json.dumps(table))
    with caplog.at_level(logging.WARNING, logger="rlcore.checkpoint.manager"):
        assert resume_path(trainer_config(tmp_path)) == tmp_path / "global_step_1"
    assert f"checkpoint {tmp_path / 'global_step_2'}: checksums.json is damaged ({named}" in caplog.text
    chosen = trainer_config(tmp_path, resume_mode="resume_path", resume_from_path=str(tmp_path / "global_step_2"))
    with pytest.raises(CheckpointError, match="checksums.json is damaged") as caught:
        resume_path(chosen)
    assert "\n" not in str(caught.value)


@contextlib.contextmanager
def unmovable(path: Path) -> Iterator[None]:
    """Make the folder ``path`` one that cannot be renamed into another folder, nor have entries added, for
    real: immutable (``chattr +i``, EPERM even for root) as root, else read-only (EACCES: moving a folder to
    another parent rewrites its ``..``)."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)], check=False).returncode:
            pytest.skip("chattr +i is not available here: root may move any folder")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        path.chmod(0o555)
        try:
            yield
        finally:
            path.chmod(0o755)


@pytest.mark.parametrize("blocked", ["global_step_2", "root"])
def test_a_failed_move_aside_names_the_folder_and_moves_nothing(tmp_path: Path, blocked: str) -> None:
    """A fresh run moving another run's checkpoints aside, when a folder may not be moved (or the root takes
    no ``previous/``): one line naming the folder and the reason, what moved before went back, no empty
    ``previous/`` folder is left."""
    root = tmp_path / "ckpt"
    first = RunIdentity.new(tmp_path / "first")
    for step in (1, 2, 3):
        CheckpointManager(trainer_config(root), first).save(step, write_part)
    before = steps_on_disk(root)
    with unmovable(root / "global_step_2" if blocked == "global_step_2" else root):
        with pytest.raises(CheckpointError) as caught:
            claim_checkpoints(trainer_config(root, save_freq=1), RunIdentity.new(tmp_path / "fresh"), None)
    message = str(caught.value)
    assert "\n" not in message
    if blocked == "root":
        assert message.startswith(f"cannot make {root / 'previous'}/"), message
        assert "; nothing was moved." in message
    else:
        assert message.startswith(f"cannot move {root / 'global_step_2'} into {root / 'previous'}/"), message
        assert "global_step_1, moved before it, went back: nothing was moved." in message
    assert f"{root} (trainer.default_local_dir) holds checkpoints of another run" in message
    assert "trainer.experiment_name" in message
    assert steps_on_disk(root) == before, "nothing moved, no empty previous/ folder"
    assert (root / LATEST_FILE).read_text() == "3"
    assert resume_path(trainer_config(root)) == root / "global_step_3"


def test_prompt_uids_are_deterministic_and_distinct() -> None:
    """The same seed and loader position give the same uids; other positions, epochs or seeds differ."""
    first = prompt_uids(1, 0, 1, 4)
    assert first == prompt_uids(1, 0, 1, 4) and len(set(first)) == 4
    others = prompt_uids(1, 0, 2, 4) + prompt_uids(1, 1, 1, 4) + prompt_uids(2, 0, 1, 4)
    assert not set(first) & set(others)


# ------------------------------------------------------------------ real runs

#: three steps per epoch: 12 training rows, 4 prompts per step
TRAIN_ROWS = 12
#: everything in the controller and the workers that a resume must restore: the critic (GAE), the adaptive
#: in-reward KL controller and the reference model, the update shuffle, the LR warm-up, sampled rollouts
RESUME_SETTINGS = (
    "algorithm.adv_estimator=gae",
    "critic.ppo_micro_batch_size_per_gpu=4",
    "critic.optim.lr=1e-3",
    "algorithm.use_kl_in_reward=true",
    "algorithm.kl_ctrl.type=adaptive",
    "algorithm.kl_ctrl.horizon=100",
    "actor_rollout_ref.actor.shuffle=true",
    "actor_rollout_ref.actor.optim.lr_warmup_steps=4",
    "trainer.total_training_steps=6",
    "trainer.test_freq=3",
    "trainer.save_freq=1",
)
#: metrics that measure time or speed, not what was trained
VOLATILE_PREFIXES = ("timing_s/", "timing_worker_s/", "timing_per_token_ms/", "perf/", "actor/weight_sync_s")


def comparable(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The metric records by step without timing and throughput values."""
    return {row["step"]: {k: v for k, v in row.items() if not k.startswith(VOLATILE_PREFIXES)} for row in rows}


def without_validation(metrics: dict[str, Any]) -> dict[str, Any]:
    """``metrics`` without the validation scores (runs with another ``test_freq`` validate at other steps)."""
    return {k: v for k, v in metrics.items() if not k.startswith("val-")}


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny task with an epoch of three steps."""
    return make_tiny_task(tmp_path_factory.mktemp("task"), train_rows=TRAIN_ROWS)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, task: dict[str, Path]) -> dict[str, Any]:
    """Six uninterrupted steps (two epochs), saving a checkpoint after every step."""
    tmp = tmp_path_factory.mktemp("full")
    _, run_dir = tiny_run(tmp, tiny_model_dir, task, *RESUME_SETTINGS)
    return {"ckpt": tmp / "ckpt", "rows": comparable(read_metrics(run_dir))}


def test_resumed_run_equals_the_uninterrupted_run(
    full_run: dict[str, Any], tiny_model_dir: Path, task: dict[str, Path], tmp_path: Path
) -> None:
    """Resuming after step 3, which ends the first epoch, reproduces steps 4..6 metric for metric: rewards,
    losses, grad norms, KL coefficient, response lengths, validation; the metrics start at step 4 in a new
    run directory. (A resume in the middle of an epoch: the crash test below.)"""
    stop = 3
    checkpoint = full_run["ckpt"] / f"global_step_{stop}"
    assert read_trainer_state(checkpoint)["data"]["position"] == stop
    _, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        *RESUME_SETTINGS,
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={checkpoint}",
    )
    resumed = comparable(read_metrics(run_dir))
    assert list(resumed) == list(range(stop + 1, 7)), "no validation before training, no repeated step"
    expected = full_run["rows"]
    for step, metrics in resumed.items():
        assert metrics == expected[step], f"step {step} differs"
    assert resumed[4]["training/epoch"] == 1 and expected[3]["training/epoch"] == 0
    assert json.loads((run_dir / "resume.json").read_text()) == {"path": str(checkpoint), "step": stop}


def test_resume_disabled_starts_fresh(
    full_run: dict[str, Any], tiny_model_dir: Path, task: dict[str, Path], tmp_path: Path
) -> None:
    """``resume_mode=disable`` ignores the checkpoints in ``default_local_dir`` and trains from step 1."""
    _, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        *RESUME_SETTINGS,
        "trainer.resume_mode=disable",
        "trainer.total_training_steps=1",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={full_run['ckpt']}",
    )
    rows = comparable(read_metrics(run_dir))
    assert list(rows) == [0, 1]
    assert without_validation(rows[1]) == without_validation(full_run["rows"][1])
    assert not (run_dir / "resume.json").exists()


def test_bad_resume_path_fails_before_training(tiny_model_dir: Path, task: dict[str, Path], tmp_path: Path) -> None:
    """A ``resume_from_path`` that is not a ``global_step_N`` folder is an error naming the key."""
    with pytest.raises(CheckpointError, match="trainer.resume_from_path"):
        tiny_run(
            tmp_path, tiny_model_dir, task, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={tmp_path}"
        )


SIGNALS_IN_DCP = """
import os, signal, sys
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from rlcore.run import run_training

real_save = dcp.save


class SignalsTwice(DefaultSavePlanner):
    \"\"\"Sends this process SIGTERM twice while DCP plans its write: the second signal arrives in the middle
    of the save (the stop handler raises there, and DCP wraps that in a CheckpointException).\"\"\"

    def create_local_plan(self):
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        return super().create_local_plan()


def save(state_dict, **kwargs):
    where = str(kwargs.get("checkpoint_id"))
    if "global_step_2.tmp-" in where and where.endswith("actor/model"):  # the actor's shards of step 2
        kwargs["planner"] = SignalsTwice()
    return real_save(state_dict, **kwargs)


dcp.save = save  # the FSDP engine calls dcp.save(...) through the module
run_training([], sys.argv[1:], [])
"""


def test_a_second_sigterm_in_the_middle_of_a_dcp_save_ends_the_run_as_interrupted(
    tiny_model_dir: Path, task: dict[str, Path], tmp_path: Path
) -> None:
    """Two SIGTERMs inside ``torch.distributed.checkpoint.save`` (of the FSDP engine's step-2 checkpoint): the
    stop handler's interrupt, wrapped by DCP, ends the run as the docs say: exit 143, no traceback, the summary
    says interrupted, the half-written folder is gone and step 1's checkpoint is the newest."""
    overrides = [
        *tiny_overrides(tmp_path, tiny_model_dir, task),
        "trainer.total_training_steps=3",
        "trainer.save_freq=1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
    ]
    proc = subprocess.run(
        [sys.executable, "-c", SIGNALS_IN_DCP, *overrides], capture_output=True, text=True, timeout=600
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 143, output
    assert "Traceback" not in output and "CheckpointException" not in output
    assert "SIGTERM: abandoning the current step" in output
    root = tmp_path / "ckpt"
    assert steps_on_disk(root) == ["global_step_1", LATEST_FILE, "rlcore-run.lock"], "no half-written folder"
    assert f"newest checkpoint: {root / 'global_step_1'}" in output
    assert "the step in progress was abandoned; steps up to 2 are logged" in output, "step 2 was logged before its save"
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted by SIGTERM"


def test_crash_in_the_middle_of_a_save_resumes_from_the_last_complete_checkpoint(
    full_run: dict[str, Any], tiny_model_dir: Path, task: dict[str, Path], tmp_path: Path
) -> None:
    """A run SIGKILLed while saving step 2 leaves ``global_step_2.tmp-*`` behind and the pointer at 1; the
    next ``auto`` run resumes from step 1 (in the middle of an epoch), deletes the half-written folder and
    trains step 2 exactly as the uninterrupted run did."""
    overrides = [
        *tiny_overrides(tmp_path, tiny_model_dir, task),
        *RESUME_SETTINGS,
        "trainer.total_training_steps=2",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
    ]
    env = {**os.environ, CRASH_ENV: "2"}
    proc = subprocess.run(
        [sys.executable, "-m", "rlcore", "run", *overrides], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    assert f"{CRASH_ENV}=2" in proc.stderr
    root = tmp_path / "ckpt"
    (half,) = [p for p in root.iterdir() if p.name.startswith("global_step_2.tmp-")]
    assert (half / "actor" / "model" / ".metadata").is_file(), "the workers had written their parts"
    assert (root / LATEST_FILE).read_text() == "1"

    _, run_dir = tiny_run(
        tmp_path / "again",
        tiny_model_dir,
        task,
        *RESUME_SETTINGS,
        "trainer.total_training_steps=2",
        "trainer.test_freq=-1",
        f"trainer.default_local_dir={root}",
    )
    assert not half.exists()
    assert json.loads((run_dir / "resume.json").read_text())["step"] == 1
    rows = comparable(read_metrics(run_dir))
    assert list(rows) == [2]
    assert rows[2] == full_run["rows"][2]
    assert (root / LATEST_FILE).read_text() == "2"


def test_a_finished_run_starts_afresh_or_stops(
    full_run: dict[str, Any],
    tiny_model_dir: Path,
    task: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A checkpoint at the run's last step (or past it) is never resumed into a run of zero steps: named by
    ``resume_path`` the run stops before any model loads or run directory exists, saying how to go on; found
    by ``auto`` (a repeated command) the run starts afresh from step 1 and says so."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(full_run["ckpt"], ckpt)  # the fresh run's checkpoints replace these
    told = (
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={ckpt / 'global_step_6'}",
        f"trainer.default_local_dir={ckpt}",
    )
    with pytest.raises(RLCoreError, match="nothing left to train.*trainer.total_training_steps"):
        tiny_run(tmp_path / "told", tiny_model_dir, task, *RESUME_SETTINGS, *told)
    assert not (tmp_path / "told" / "runs").exists()
    found = ("trainer.total_training_steps=1", f"trainer.default_local_dir={ckpt}")
    _, run_dir = tiny_run(tmp_path / "found", tiny_model_dir, task, *RESUME_SETTINGS, *found)
    assert (
        "is at step 6 of the run's 1: nothing is left to train from it, so this is a fresh run"
        in capsys.readouterr().out
    )
    assert not (run_dir / "resume.json").exists()
    assert [row["step"] for row in read_metrics(run_dir)] == [0, 1]
    assert (ckpt / LATEST_FILE).read_text() == "1"
