"""CPU time of reading typed config sections: ``load_config`` + ``check_values``, ``check_values`` and
``Sections.from_tree`` alone, an in-process ``rlcore run --dry-run`` on the test kit's tiny overrides, and one
in-process tiny training run (``rlcore_testkit.runs.tiny_run``, local executor, two steps).

Each figure is the best of ``--repeats`` runs in one warm process (after one warm-up run), in process CPU
milliseconds; prints one JSON object.

    OMP_NUM_THREADS=1 python bench/config_read.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def best_ms(work: Callable[[], object], repeats: int) -> float:
    """The least process CPU time of ``repeats`` calls of ``work`` (after one warm-up call), in milliseconds."""
    work()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        work()
        times.append(time.process_time() - start)
    return round(min(times) * 1000, 2)


def main() -> None:
    """Print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats

    from rlcore_testkit.runs import dry_run, make_tiny_task, tiny_overrides, tiny_run
    from rlcore_testkit.tiny import make_tiny_model_dir

    from rlcore.config.loader import load_config
    from rlcore.config.schema import Sections
    from rlcore.config.validate import check_values

    root = Path(tempfile.mkdtemp())
    model, task = make_tiny_model_dir(root / "model"), make_tiny_task(root / "task")
    overrides = tiny_overrides(root, model, task)
    config = load_config([], [], [])

    def dry() -> None:
        result = dry_run(*overrides)
        if result.exit_code != 0:
            raise SystemExit(f"the dry run failed:\n{result.output}")

    runs = iter(range(repeats + 1))

    def run() -> None:
        with contextlib.redirect_stdout(io.StringIO()):  # the run's summary lines
            tiny_run(root / f"run{next(runs)}", model, task)

    figures = {
        "load_config_check_values_ms": best_ms(lambda: check_values(load_config([], [], [])), repeats),
        "check_values_ms": best_ms(lambda: check_values(config), repeats),
        "sections_from_tree_ms": best_ms(lambda: Sections.from_tree(config), repeats),
        "dry_run_ms": best_ms(dry, repeats),
        "tiny_run_ms": best_ms(run, repeats),
    }
    print(json.dumps({"repeats": repeats, **figures}))


if __name__ == "__main__":
    main()
