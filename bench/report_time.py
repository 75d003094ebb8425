"""Time of the report a run writes at its end (rlcore-plugin-report's ``summary_lines``: the panels,
``report.png``, ``index.html`` and ``reward_curve.png``), on a copy of a finished run's directory.

Each repeat runs in a fresh process on a fresh copy: "cold" is the first report of a process (matplotlib
imported then, as at the end of ``rlcore run``), "warm" a second report in the same process (as a run started
in-process after another). Prints one JSON object with the median and min, in wall and CPU seconds, and the
files written with their sizes.

    python bench/report_time.py RUN_DIR [--repeats 5] [--src PLUGIN_SRC]

``--src`` puts another copy of ``plugins/report/src`` first on the path (to compare two versions on the same
run directory, e.g. ``--src /path/to/main/plugins/report/src``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, shutil, sys, time
sys.path[:0] = [p for p in sys.argv[3:4] if p]
from pathlib import Path
from rlcore_plugin_report.summary import end_of_run_lines
result = {}
for phase in ("cold", "warm"):
    run_dir = Path(sys.argv[2]) / phase
    shutil.copytree(sys.argv[1], run_dir)
    shutil.rmtree(run_dir / "report", ignore_errors=True)
    (run_dir / "reward_curve.png").unlink(missing_ok=True)
    wall, cpu = time.perf_counter(), time.process_time()
    lines = end_of_run_lines(run_dir)
    result[phase] = {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu, "lines": lines}
import rlcore_plugin_report
result["module"] = rlcore_plugin_report.__file__
print(json.dumps(result))
"""


def stats(values: list[float]) -> dict[str, float]:
    """Median and min, rounded to milliseconds."""
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3)}


def main() -> None:
    """Print the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a finished run's directory (its metrics.jsonl and config.yaml)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--src", default="", help="a plugins/report/src to import the plugin from")
    args = parser.parse_args()
    if not (args.run_dir / "metrics.jsonl").is_file():
        parser.error(f"{args.run_dir} is not a run directory: it holds no metrics.jsonl")
    times: dict[str, dict[str, list[float]]] = {p: {"wall_s": [], "cpu_s": []} for p in ("cold", "warm")}
    with tempfile.TemporaryDirectory(prefix="report-time-") as tmp:
        for repeat in range(args.repeats):
            work = Path(tmp) / str(repeat)
            work.mkdir()
            child = subprocess.run(
                [sys.executable, "-c", CHILD, str(args.run_dir), str(work), args.src],
                capture_output=True,
                text=True,
                check=True,
            )
            result = json.loads(child.stdout.splitlines()[-1])
            for phase in times:
                for key in times[phase]:
                    times[phase][key].append(result[phase][key])
        written = sorted(
            (path.relative_to(work / "cold").as_posix(), path.stat().st_size)
            for path in (work / "cold").rglob("*.png")
            if "model" not in path.parts
        )
        shutil.rmtree(work)
    print(
        json.dumps(
            {
                "benchmark": "report_time",
                "run_dir": str(args.run_dir),
                "plugin": result["module"],
                "repeats": args.repeats,
                **{phase: {key: stats(values) for key, values in times[phase].items()} for phase in times},
                "summary_lines": result["cold"]["lines"],
                "png_bytes": dict(written),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
