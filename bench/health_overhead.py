"""What the run-health monitors cost per step on the bundled run, against the step time.

Runs the bundled default task (``rlcore run``'s code path, in this process) with every built-in monitor on,
timing the two calls the trainer makes into run health each step — keeping the step's decoded samples
(``HealthLoop.take_samples``, for the monitors whose spec asks for responses) and checking the monitors and
acting on their findings (``HealthLoop.check``) — with ``time.perf_counter`` around the real methods. Prints
one JSON object: the steps, the health time per step (mean, max, in ms), the step time (``timing_s/step``,
mean, in s) and the health time as a share of the step time (the target is under 1 %), with the load average.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def timed(spent: list[float], method: Callable[..., Any]) -> Callable[..., Any]:
    """``method``, appending the wall time of each call to ``spent``."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    return wrapper


def main() -> None:
    """Parse the arguments, run the bundled task with the health calls timed, print the JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="training steps (default 40, the bundled run's)")
    args = parser.parse_args()

    from rlcore.controller import health
    from rlcore.run import run_training
    from rlcore.tracking.sinks import read_metrics

    sampling: list[float] = []
    checking: list[float] = []
    health.HealthLoop.take_samples = timed(sampling, health.HealthLoop.take_samples)  # type: ignore[method-assign]
    health.HealthLoop.check = timed(checking, health.HealthLoop.check)  # type: ignore[method-assign]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        overrides = [
            f"trainer.total_training_steps={args.steps}",
            f"trainer.runs_dir={folder}/runs",
            f"trainer.default_local_dir={folder}/ckpt",
            "trainer.save_final_model=false",
            "trainer.progress_bar=false",
        ]
        run_training([], overrides, [])
        (metrics,) = Path(folder, "runs").glob("*/*/metrics.jsonl")
        rows = [row for row in read_metrics(metrics) if row.get("timing_s/step") is not None]
    step_s = [float(row["timing_s/step"]) for row in rows]
    spent = sum(sampling) + sum(checking)
    result = {
        "steps": len(rows),
        "health_ms_per_step": round(1000 * spent / len(rows), 3),
        "take_samples_ms": {"mean": round(1000 * statistics.fmean(sampling or [0.0]), 3), "calls": len(sampling)},
        "check_ms": {
            "mean": round(1000 * statistics.fmean(checking or [0.0]), 3),
            "max": round(1000 * max(checking or [0.0]), 3),
        },
        "step_s_mean": round(statistics.fmean(step_s), 4),
        "health_share_of_step_pct": round(100 * spent / sum(step_s), 3),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
