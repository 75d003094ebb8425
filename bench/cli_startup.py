"""Wall time of `rlcore --help` and `rlcore plugins` with every bundled plugin installed.

Runs each command N times in fresh processes (after one warm-up run that fills the OS file cache) and
prints one JSON object with the median and min/max in seconds, plus whether torch was imported.

    python bench/cli_startup.py [--runs 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "rlcore --help": ["--help"],
    "rlcore plugins": ["plugins"],
    "rlcore plugins --all --json": ["plugins", "--all", "--json"],
}
PROBE = (
    "import sys\nfrom rlcore.cli import main\nsys.argv = ['rlcore', 'plugins', '--all']\n"
    "try:\n    main()\nexcept SystemExit:\n    pass\nprint('TORCH', 'torch' in sys.modules)\n"
)


def time_command(args: list[str], runs: int) -> dict[str, float]:
    """Median/min/max wall seconds of ``python -m rlcore ARGS`` over ``runs`` fresh processes."""
    subprocess.run([sys.executable, "-m", "rlcore", *args], capture_output=True, check=True)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "rlcore", *args], capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return {
        "median_s": round(statistics.median(times), 4),
        "min_s": round(min(times), 4),
        "max_s": round(max(times), 4),
    }


def main() -> None:
    """Print the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    bare = time_command(["--version"], args.runs)
    python_only = []
    for _ in range(args.runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        python_only.append(time.perf_counter() - start)
    probe = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    result = {
        "benchmark": "cli_startup",
        "runs": args.runs,
        "python_interpreter_only_median_s": round(statistics.median(python_only), 4),
        "rlcore --version": bare,
        **{name: time_command(cmd, args.runs) for name, cmd in COMMANDS.items()},
        "torch_imported_by_plugins_listing": probe.stdout.strip().endswith("True"),
        "target_s": 0.5,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
