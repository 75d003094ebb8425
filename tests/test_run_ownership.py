"""A run owns its checkpoint folder: a second run is refused while the first holds the folder's lock (real
processes), the lock dies with its holder (even a forked child of it does not keep it), and a run never
replaces checkpoints of another lineage (real runs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.checkpoint import (
    LATEST_FILE,
    RUN_FILE,
    CheckpointError,
    CheckpointManager,
    RunIdentity,
    claim_checkpoints,
)
from rlcore.checkpoint.lock import LOCK_FILE, lock_checkpoint_folder
from rlcore.config.schema import TrainerConfig


def config(root: Path, **trainer: Any) -> TrainerConfig:
    """The ``trainer`` section the lock, the lineage check and the checkpoint manager read (saving every step)."""
    return TrainerConfig(default_local_dir=str(root), **{"save_freq": 1, **trainer})


HOLDER = """
import os, sys, time
from pathlib import Path
from rlcore.checkpoint import RunIdentity
from rlcore.checkpoint.lock import lock_checkpoint_folder
from rlcore.config.schema import TrainerConfig

root = Path(sys.argv[1])
config = TrainerConfig(default_local_dir=str(root), save_freq=1, resume_mode="auto")
lock = lock_checkpoint_folder(config, RunIdentity.new("/runs/first-run"))
if sys.argv[2] == "fork":  # a child that outlives this process must not keep the folder locked
    if os.fork() == 0:  # the fork hooks have run once fork() returns here: the child says so and lives on
        print(os.getpid(), flush=True)
        time.sleep(120)
        os._exit(0)
    os._exit(0)
print("locked", flush=True)
time.sleep(120)
"""


def hold_lock(root: Path, mode: str = "hold") -> tuple[subprocess.Popen[str], str]:
    """A real process that takes the folder's lock, and the line it printed once it held it."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(root), mode], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def test_a_second_run_is_refused_naming_the_first_and_the_lock_dies_with_it(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    root = tmp_path / "ckpt"
    holder, line = hold_lock(root)
    try:
        assert line == "locked"
        with pytest.raises(CheckpointError) as caught:
            lock_checkpoint_folder(config(root), RunIdentity.new(tmp_path / "second"))
        message = str(caught.value)
        assert f"trainer.default_local_dir={root} is in use by another run" in message
        assert f"PID {holder.pid} on host {os.uname().nodename}" in message
        assert "run directory /runs/first-run" in message and "started 20" in message
        assert "\n" not in message
        task = make_tiny_task(tmp_path / "task")
        with pytest.raises(CheckpointError, match=f"in use by another run: run .*PID {holder.pid}"):
            tiny_run(tmp_path, tiny_model_dir, task, "trainer.save_freq=1", f"trainer.default_local_dir={root}")
        assert not list((tmp_path / "runs").glob("*/*")), "a refused run opens no run directory"
        assert not list(root.glob("global_step_*"))
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    assert (root / LOCK_FILE).is_file(), "the lock file stays behind, naming the dead run"
    lock = lock_checkpoint_folder(config(root), RunIdentity.new(tmp_path / "third"))
    assert lock is not None, "a killed holder's lock is free at once"
    assert json.loads((root / LOCK_FILE).read_text())["run_dir"] == str(tmp_path / "third")
    lock.release()


def test_a_forked_child_of_the_holder_does_not_keep_the_lock(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    holder, line = hold_lock(root, "fork")
    child = int(line)
    holder.wait(30)
    try:
        assert Path(f"/proc/{child}").exists(), "the child outlives its parent"
        lock = lock_checkpoint_folder(config(root), RunIdentity.new(tmp_path / "next"))
        assert lock is not None
        lock.release()
    finally:
        os.kill(child, signal.SIGKILL)


def test_runs_that_save_nothing_and_resume_nothing_take_no_lock(tmp_path: Path) -> None:
    assert lock_checkpoint_folder(config(tmp_path / "none", save_freq=-1), RunIdentity.new(tmp_path)) is None
    assert not (tmp_path / "none").exists()


# ------------------------------------------------------------------ lineage: whose checkpoint is it


def write_part(folder: Path) -> None:
    (folder / "state.json").write_text("{}")


def test_a_checkpoint_records_its_run_and_another_lineage_is_never_replaced(tmp_path: Path) -> None:
    first = RunIdentity.new(tmp_path / "first")
    CheckpointManager(config(tmp_path), first).save(1, write_part)
    CheckpointManager(config(tmp_path), first).save(2, write_part)
    assert json.loads((tmp_path / "global_step_2" / RUN_FILE).read_text()) == first.record()

    fresh = RunIdentity.new(tmp_path / "fresh")
    with pytest.raises(CheckpointError, match=r"global_step_2 was written by run .* it is not replaced"):
        CheckpointManager(config(tmp_path), fresh).save(2, write_part)
    assert json.loads((tmp_path / "global_step_2" / RUN_FILE).read_text())["run_id"] == first.run_id

    resumed = RunIdentity.new(tmp_path / "resumed")
    claim_checkpoints(config(tmp_path), resumed, tmp_path / "global_step_1")  # continues the first run's lineage
    assert resumed.lineage == first.run_id
    CheckpointManager(config(tmp_path), resumed).save(2, write_part)
    record = json.loads((tmp_path / "global_step_2" / RUN_FILE).read_text())
    assert (record["run_id"], record["lineage"]) == (resumed.run_id, first.run_id)

    claim_checkpoints(config(tmp_path, save_freq=-1), RunIdentity.new(tmp_path / "reader"), None)  # saves nothing
    assert (tmp_path / "global_step_2").is_dir()


def test_a_fresh_run_moves_another_runs_checkpoints_aside(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = RunIdentity.new(tmp_path / "first")
    CheckpointManager(config(tmp_path), first).save(1, write_part)
    CheckpointManager(config(tmp_path), first).save(2, write_part)

    fresh = RunIdentity.new(tmp_path / "fresh")
    claim_checkpoints(config(tmp_path), fresh, None)
    (aside,) = (tmp_path / "previous").iterdir()
    assert aside.name.endswith(f"-{first.run_id}")
    assert sorted(p.name for p in aside.iterdir()) == ["global_step_1", "global_step_2", LATEST_FILE]
    assert json.loads((aside / "global_step_2" / RUN_FILE).read_text()) == first.record()
    out = capsys.readouterr().out
    assert f"held 2 checkpoint(s) of another run (run {first.run_id} (PID {os.getpid()}" in out
    assert f"this fresh run moved them to {aside}" in out

    manager = CheckpointManager(config(tmp_path), fresh)
    assert manager.complete() == [] and manager.latest() is None
    manager.save(1, write_part)  # the folder is the fresh run's now
    assert json.loads((tmp_path / "global_step_1" / RUN_FILE).read_text())["lineage"] == fresh.run_id


def test_a_run_resuming_from_elsewhere_is_refused_in_a_folder_of_another_lineage(tmp_path: Path) -> None:
    elsewhere, ckpt = tmp_path / "elsewhere", tmp_path / "ckpt"
    CheckpointManager(config(elsewhere), RunIdentity.new(tmp_path / "a")).save(1, write_part)
    holder = RunIdentity.new(tmp_path / "b")
    CheckpointManager(config(ckpt), holder).save(1, write_part)
    CheckpointManager(config(ckpt), holder).save(2, write_part)
    with pytest.raises(CheckpointError) as caught:
        claim_checkpoints(config(ckpt), RunIdentity.new(tmp_path / "c"), elsewhere / "global_step_1")
    message = str(caught.value)
    assert f"holds global_step_1 (and 1 more), written by run {holder.run_id} (PID {os.getpid()}" in message
    assert f"run directory {tmp_path / 'b'}" in message and f"resumes from {elsewhere / 'global_step_1'}" in message
    assert "trainer.experiment_name" in message
    assert not (ckpt / "previous").exists()


def test_checkpoints_from_before_run_records_are_moved_from_fresh_runs_and_resumable(tmp_path: Path) -> None:
    CheckpointManager(config(tmp_path)).save(1, write_part)  # no identity: no run.json, as older rlcore wrote
    resumed = RunIdentity.new(tmp_path / "resumed")
    claim_checkpoints(config(tmp_path), resumed, tmp_path / "global_step_1")
    CheckpointManager(config(tmp_path), resumed).save(1, write_part)

    (tmp_path / "global_step_1" / RUN_FILE).unlink()  # written before rlcore recorded runs again
    claim_checkpoints(config(tmp_path), RunIdentity.new(tmp_path / "fresh"), None)
    (aside,) = (tmp_path / "previous").iterdir()
    assert aside.name.endswith("-unrecorded") and (aside / "global_step_1").is_dir()


# ------------------------------------------------------------------ real runs


def test_real_runs_a_fresh_run_moves_the_first_aside_a_resumed_one_continues_the_lineage(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    task = make_tiny_task(tmp_path / "task")
    ckpt = tmp_path / "ckpt"
    shared = (
        "trainer.save_freq=1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        f"trainer.default_local_dir={ckpt}",
    )
    _, first_dir = tiny_run(tmp_path / "first", tiny_model_dir, task, *shared)
    first = json.loads((ckpt / "global_step_2" / RUN_FILE).read_text())
    assert first["run_dir"] == str(first_dir) and first["lineage"] == first["run_id"]

    _, fresh_dir = tiny_run(tmp_path / "fresh", tiny_model_dir, task, *shared, "trainer.resume_mode=disable")
    (aside,) = (ckpt / "previous").iterdir()
    assert json.loads((aside / "global_step_2" / RUN_FILE).read_text()) == first
    fresh = json.loads((ckpt / "global_step_2" / RUN_FILE).read_text())
    assert fresh["run_dir"] == str(fresh_dir) and fresh["lineage"] == fresh["run_id"] != first["run_id"]

    with pytest.raises(CheckpointError, match=rf"holds global_step_1 \(and 1 more\), written by run {fresh['run_id']}"):
        tiny_run(
            tmp_path / "mixed",
            tiny_model_dir,
            task,
            *shared,
            "trainer.resume_mode=resume_path",
            f"trainer.resume_from_path={aside / 'global_step_1'}",
        )
    assert not list((tmp_path / "mixed").glob("runs/*/*")), "refused before the run directory is made"

    _, resumed_dir = tiny_run(
        tmp_path / "resumed",
        tiny_model_dir,
        task,
        *shared,
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={ckpt / 'global_step_1'}",
    )
    record = json.loads((ckpt / "global_step_2" / RUN_FILE).read_text())
    assert record["run_dir"] == str(resumed_dir) and record["lineage"] == fresh["run_id"]
