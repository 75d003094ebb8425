"""``model.use_shm``: the model is copied into shared memory once per node, every process loads the same copy,
and the copy goes once no live process uses it (:mod:`rlcore.modelkit.shm`, :class:`WorkerBase`)."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from rlcore.errors import RLCoreError
from rlcore.modelkit import shm


def model_folder(path: Path, weights: bytes = b"w" * 4096) -> Path:
    """A small model-like folder: a config and a weights file."""
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model_type": "qwen2"}')
    (path / "model.safetensors").write_bytes(weights)
    return path


def stage_and_report(source: str, root: str, queue: multiprocessing.Queue, together: Any) -> None:
    """A process of the node (a worker of one run): stage the copy, report its path, its inode and whether it
    holds the source's weights, wait until every process has it (the run), then exit (releasing it)."""
    staged = shm.stage(source, "actor_rollout_ref.model.use_shm", Path(root))
    same = (Path(staged) / "model.safetensors").read_bytes() == (Path(source) / "model.safetensors").read_bytes()
    queue.put((staged, os.stat(staged).st_ino, same))
    together.wait(timeout=120)


def test_processes_of_a_node_share_one_copy(tmp_path: Path) -> None:
    source = model_folder(tmp_path / "model")
    root = tmp_path / "shm"
    root.mkdir()
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    together = context.Barrier(3)
    workers = [
        context.Process(target=stage_and_report, args=(str(source), str(root), queue, together)) for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    reports = [queue.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert all(worker.exitcode == 0 for worker in workers)
    paths = {staged for staged, _, _ in reports}
    inodes = {inode for _, inode, _ in reports}
    assert len(paths) == 1 and len(inodes) == 1  # one copy, never replaced
    assert all(same for _, _, same in reports)
    assert not list((root / "rlcore-shm").glob("*.partial-*"))
    (staged,) = paths
    assert not Path(staged).exists()  # the last process to exit removed it


def test_the_copy_stays_while_another_process_uses_it(tmp_path: Path) -> None:
    source = model_folder(tmp_path / "model")
    root = tmp_path / "shm"
    root.mkdir()
    staged = shm.stage(str(source), "k", root)
    users = Path(staged).parent / f"{Path(staged).name}.users"
    (users / str(os.getppid())).touch()  # a live process of this node (the test's parent) uses it too
    shm.release(staged)
    assert Path(staged).exists()
    (users / str(os.getppid())).unlink()
    shm.release(staged)  # released already: nothing happens
    assert Path(staged).exists()


def test_a_changed_model_gets_a_fresh_copy(tmp_path: Path) -> None:
    source = model_folder(tmp_path / "model")
    root = tmp_path / "shm"
    root.mkdir()
    first = shm.stage(str(source), "k", root)
    (source / "model.safetensors").write_bytes(b"x" * 5000)
    second = shm.stage(str(source), "k", root)
    assert first != second and (Path(second) / "model.safetensors").read_bytes() == b"x" * 5000
    for staged in (first, second):
        shm.release(staged)
        assert not Path(staged).exists()


def test_a_hub_name_is_an_error_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(
        RLCoreError, match=r"critic\.model\.use_shm=true needs a local model directory.*'Qwen/Qwen3-8B'"
    ):
        shm.stage("Qwen/Qwen3-8B", "critic.model.use_shm", tmp_path)


def test_a_worker_loads_from_shared_memory_and_cleans_up(tiny_model_dir: Path) -> None:
    from rlcore_testkit.contracts.backend import TrainingBackendContract

    class FSDPSettings(TrainingBackendContract):
        component_name = "fsdp"

    worker = FSDPSettings.make_actor(tiny_model_dir, role="actor_rollout", **{"actor_rollout_ref.model.use_shm": True})
    try:
        staged = worker.staged[0]
        assert staged.startswith(str(shm.SHM_ROOT / "rlcore-shm"))
        assert worker.config.actor_rollout_ref.model.path == staged
        assert worker.rollout_engine.weight_version == 1 and Path(staged, "config.json").exists()
    finally:
        FSDPSettings.close(worker)
    assert not Path(staged).exists()
