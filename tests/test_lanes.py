"""Pinned lanes (``trainer.lane_cpus``): the keys' checks, and real Ray workers of each pool pinned to their
cores and torch threads (every thread of the process, before any torch work)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlcore.config import ConfigError, load_config
from rlcore.config.lanes import format_cpus, lane_pins, lane_plan_lines, parse_cpu_list

PROBE = '''
import os


class ProbeWorker:
    """Reports where its process runs: its cores, every thread's cores and torch's threads."""

    def __init__(self, config, role, rank, world_size):
        self.role = role

    def where(self):
        import torch

        tasks = sorted(int(t) for t in os.listdir("/proc/self/task"))
        threads = {frozenset(os.sched_getaffinity(tid)) for tid in tasks if os.path.exists(f"/proc/self/task/{tid}")}
        return {
            "role": self.role,
            "cpus": sorted(os.sched_getaffinity(0)),
            "thread_cpus": sorted(sorted(s) for s in threads),
            "torch_threads": torch.get_num_threads(),
            "omp": os.environ.get("OMP_NUM_THREADS"),
        }
'''


def config(*overrides: str) -> Any:
    """A ray-executor config on CPU with ``overrides``."""
    return load_config([], ["trainer.executor=ray", "trainer.device=cpu", *overrides], [])


# ------------------------------------------------------------------ the keys
def test_cpu_lists_parse_and_print_compactly() -> None:
    assert parse_cpu_list("0-3,8", "k") == {0, 1, 2, 3, 8}
    assert parse_cpu_list(5, "k") == {5}
    assert format_cpus({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    for bad in ("3-1", "a", "1,,2", "", True):
        with pytest.raises(ConfigError, match="k"):
            parse_cpu_list(bad, "k")


def test_unpinned_by_default_with_no_plan_line() -> None:
    cfg = config("trainer.placement=split")
    assert lane_pins(cfg) == {} and lane_plan_lines(cfg) == []


def test_each_pool_gets_its_cores_and_a_share_of_threads() -> None:
    cfg = config(
        "trainer.placement=split",
        "trainer.n_gpus_per_node=2",
        "trainer.rollout_n_gpus_per_node=1",
        "trainer.lane_cpus.trainer=0-3",
        "trainer.lane_cpus.rollout=4-5",
    )
    pins = lane_pins(cfg, available=frozenset(range(8)))
    assert (pins["train"].cpus, pins["train"].threads) == (frozenset(range(4)), 2)
    assert (pins["rollout"].cpus, pins["rollout"].threads) == (frozenset({4, 5}), 2)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["trainer.placement=split", "trainer.lane_cpus.trainer=0-1", "trainer.lane_cpus.rollout=1"], "share cores 1"),
        (["trainer.lane_cpus.rollout=0"], r"trainer.lane_cpus.rollout pins the rollout pool.*placement=split"),
        (["trainer.lane_cpus.trainer=0-x"], r"trainer.lane_cpus.trainer='0-x'"),
        (["trainer.lane_cpus.trainer=4096"], r"trainer.lane_cpus.trainer=4096: cores 4096 are not among"),
    ],
)
def test_bad_lanes_are_one_line_naming_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        lane_pins(config(*overrides))


def test_the_local_executor_refuses_the_key() -> None:
    cfg = load_config([], ["trainer.executor=local", "trainer.lane_cpus.trainer=0"], [])
    with pytest.raises(ConfigError, match="trainer.lane_cpus pins Ray worker processes and needs trainer.executor=ray"):
        lane_pins(cfg)


def test_the_plan_line_shows_each_pool() -> None:
    cfg = config("trainer.placement=split", "trainer.lane_cpus.rollout=1")
    assert lane_plan_lines(cfg) == [
        "Pinned lanes (trainer.lane_cpus): train pool unpinned; rollout pool on cores 1, 1 torch thread(s) per worker"
    ]


# ------------------------------------------------------------------ real workers
@pytest.fixture
def local_ray(tmp_path: Path) -> Iterator[None]:
    """A local Ray with 4 logical CPUs whose workers can import the probe worker (``PYTHONPATH``)."""
    ray = pytest.importorskip("ray")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 usable cores")
    (tmp_path / "lanes_probe.py").write_text(PROBE)
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), previous) if p)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        if previous is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = previous


def test_ray_workers_of_each_lane_run_on_their_cores_and_threads(local_ray: None) -> None:
    from rlcore.controller.ray_executor import RayWorkerGroup
    from rlcore.controller.worker_spec import WorkerSpec

    spec = WorkerSpec("lanes_probe:ProbeWorker")
    first, second = sorted(os.sched_getaffinity(0))[:2]
    split = config(
        "trainer.placement=split",
        f"trainer.lane_cpus.trainer={first}",
        f"trainer.lane_cpus.rollout={second}",
    )
    train = RayWorkerGroup(spec, split, "actor", "train")
    rollout = RayWorkerGroup(spec, split, "rollout", "rollout")
    try:
        for group, core in ((train, first), (rollout, second)):
            (where,) = group.call_all("where")
            assert where["cpus"] == [core] and where["thread_cpus"] == [[core]], where
            assert (where["torch_threads"], where["omp"]) == (1, "1"), where
    finally:
        rollout.shutdown()
        train.shutdown()
    both = f"{first},{second}"
    wide = RayWorkerGroup(spec, config(f"trainer.lane_cpus.trainer={both}"), "actor", "train")
    try:
        (where,) = wide.call_all("where")
        assert where["cpus"] == [first, second] and where["torch_threads"] == 2, where
    finally:
        wide.shutdown()
