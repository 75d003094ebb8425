"""The ``local`` worker group and the typed roles of :func:`rlcore.controller.worker_group.make_worker_group`."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import get_args

import pytest
from omegaconf import OmegaConf

from rlcore.api.groups import ActorRole
from rlcore.controller.worker_group import LocalWorkerGroup, make_worker_group
from rlcore.controller.worker_spec import WorkerSpec
from rlcore.workers.actor import ROLE_PARTS

WORKER = """
class RankWorker:
    def __init__(self, config, role, rank, world_size):
        self.role, self.rank, self.world_size = role, rank, world_size

    def describe(self, suffix=""):
        return f"{self.role}:{self.rank}/{self.world_size}{suffix}"
"""


def test_actor_roles_are_the_actor_workers_roles() -> None:
    """``ActorRole`` (the roles typed as an ``ActorGroup``) lists exactly the actor worker's roles."""
    assert sorted(get_args(ActorRole)) == sorted(ROLE_PARTS)


def test_local_call_all_returns_the_one_ranks_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``call_all`` on a local group is the one worker's result as a list, and is timed like any call."""
    (tmp_path / "rank_worker.py").write_text(textwrap.dedent(WORKER))
    monkeypatch.syspath_prepend(str(tmp_path))
    config = OmegaConf.create({"trainer": {"executor": "local"}})
    group = make_worker_group(WorkerSpec("rank_worker:RankWorker"), config, "critic")
    assert isinstance(group, LocalWorkerGroup)
    assert group.call_all("describe", suffix="!") == ["critic:0/1!"]
    assert "describe" in group.pop_compute_s()
