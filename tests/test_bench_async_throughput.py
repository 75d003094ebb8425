"""``bench/async_throughput.py``'s busy-interval arithmetic on a hand-made Ray timeline: each lane's calls
(tasks named ``<role>.<method>``), the steps cut at the trainer's actor updates, and the share of the timed
window in which both lanes are busy. Speeds are measured by the bench itself, never asserted here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest


def task(name: str, start: float, end: float, worker: str = "w") -> dict[str, Any]:
    """A Ray timeline event of a task named ``name`` from ``start`` to ``end`` seconds."""
    return {"cat": f"task::{name}", "ph": "X", "ts": start * 1e6, "dur": (end - start) * 1e6, "tid": worker}


def test_both_lanes_busy_is_the_intersection_over_the_timed_steps(bench_script: Callable[[str], ModuleType]) -> None:
    bench = bench_script("async_throughput")
    events = [
        task("RayWorker.__init__", 0, 1),  # Ray's own start-up tasks are not a lane's work
        task("rollout.generate_sequences", 1, 3),
        task("actor.compute_log_prob", 3, 4),
        task("actor.update_actor", 4, 5),  # step 1 (warm-up) ends at 5
        task("rollout.generate_sequences", 4.5, 7),
        task("actor.update_actor", 5, 8, "rank0"),  # step 2: two ranks, one call
        task("actor.update_actor", 5.5, 8, "rank1"),
        task("rollout.generate_sequences", 8, 9),
        task("actor_ref.compute_ref_log_prob", 8.5, 9),
        task("actor.update_actor", 9, 11),  # step 3 ends at 11
        {"cat": "task:execute", "ph": "X", "ts": 0, "dur": 1e9},  # Ray's per-task phases are skipped
    ]
    figures = bench.busy_figures(events, warmup=1)
    # window 5..11: trainer busy 5-8, 8.5-11 (5.5 s); rollout 5-7, 8-9 (3 s); both 5-7, 8.5-9 (2.5 s)
    assert figures["window_s"] == 6.0
    assert figures["trainer_busy_share"] == round(5.5 / 6, 4)
    assert figures["rollout_busy_share"] == 0.5
    assert figures["both_busy_share"] == round(2.5 / 6, 4)
    assert figures["both_busy_share_per_step"] == [round(2 / 3, 4), round(0.5 / 3, 4)]


def test_too_few_updates_for_the_warmup_is_an_error(bench_script: Callable[[str], ModuleType]) -> None:
    bench = bench_script("async_throughput")
    with pytest.raises(bench.BenchError, match="1 actor updates, not more than the 1 warm-up steps"):
        bench.busy_figures([task("rollout.generate_sequences", 0, 1), task("actor.update_actor", 1, 2)], warmup=1)


def test_separate_async_with_partial_rollout_keeps_verls_invariant(bench_script: Callable[[str], ModuleType]) -> None:
    """The partial-rollout lane mode runs separate_async in 16-token rounds with the preset's parameter_sync_step,
    like plain separate_async."""
    bench = bench_script("async_throughput")
    args = bench.parse_args(["--modes", "separate_async_partial", "--pin", "none"])
    overrides = bench.mode_overrides(args, "separate_async_partial", Path("runs"), Path("timeline.json"))
    assert "trainer.v1.trainer_mode=separate_async" in overrides
    assert "trainer.v1.partial_rollout_tokens=16" in overrides
    assert bench.sync_step_override("separate_async") == bench.sync_step_override("separate_async_partial") != []
    assert set(bench.sync_step_override("separate_async")) <= set(overrides)
