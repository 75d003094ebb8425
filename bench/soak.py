"""Soak: a long CPU run of the tiny task; does the controller's memory stay flat?

Runs ``--steps`` steps (default 300) of GRPO on the tiny model and task of :mod:`rlcore_testkit.runs`
(local executor, FSDP2 on gloo, HF rollout, scorer processes), records the process's resident memory after
every step (``/proc/self/statm``) and its peak (``ru_maxrss``), and prints one JSON object: the RSS curve
(every ``--every`` steps), the peak RSS at step ``--from`` and at the end, and their growth in percent.
The check of issue 15 is a growth below 5 % between step 50 and step 300.

    python bench/soak.py [--steps 300] [--from 50] [--every 25] [--out soak.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from rlcore_testkit.runs import make_tiny_task, tiny_overrides
from rlcore_testkit.tiny import make_tiny_model_dir

import rlcore
from rlcore.plugins import PluginRecord, make_plugin_manager, set_plugin_manager

PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20


def rss_mb() -> float:
    """The current resident set size of this process in MB."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * PAGE_MB


def peak_rss_mb() -> float:
    """The peak resident set size of this process so far in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class MemoryProbe:
    """A plugin that records the RSS and peak RSS after each step."""

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []
        self.start = time.perf_counter()

    @rlcore.hookimpl
    def on_step_end(self, run: Any, step: int, metrics: dict[str, Any]) -> None:
        self.rows.append(
            {
                "step": step,
                "rss_mb": round(rss_mb(), 1),
                "peak_rss_mb": round(peak_rss_mb(), 1),
                "wall_s": round(time.perf_counter() - self.start, 1),
            }
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--from", dest="start", type=int, default=50)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="rlcore-soak-"))
    model_dir = make_tiny_model_dir(root / "model")
    task = make_tiny_task(root / "task", train_rows=64, test_rows=4)
    manager = make_plugin_manager()
    probe = MemoryProbe()
    manager.records["soak-probe"] = PluginRecord(name="soak-probe", version=None, builtin=False)
    manager._register(probe, manager.records["soak-probe"])
    set_plugin_manager(manager)

    from rlcore.run import run_training

    overrides = [
        *tiny_overrides(root, model_dir, task),
        "algorithm.adv_estimator=grpo",
        f"trainer.total_training_steps={args.steps}",
        "trainer.test_freq=100",
        "trainer.save_freq=100",
        "trainer.logger=[]",
        "trainer.val_before_train=false",
    ]
    run_training([], overrides, [])
    rows = probe.rows
    at_start = next(r for r in rows if r["step"] == args.start)
    end = rows[-1]
    result = {
        "steps": len(rows),
        "wall_s": end["wall_s"],
        f"peak_rss_mb_at_step_{args.start}": at_start["peak_rss_mb"],
        f"peak_rss_mb_at_step_{end['step']}": end["peak_rss_mb"],
        "peak_rss_growth_pct": round(100 * (end["peak_rss_mb"] / at_start["peak_rss_mb"] - 1), 2),
        "rss_growth_pct": round(100 * (end["rss_mb"] / at_start["rss_mb"] - 1), 2),
        "curve": [r for r in rows if r["step"] % args.every == 0 or r["step"] in (1, args.start)],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
