"""Rewrite ``tests/slow_tests.txt`` from a pytest durations report.

``conftest.py`` marks the tests listed there ``slow``, so that ``pytest -m "not slow"`` stays a quick loop.
Measure on an idle machine, with the quick set as it is, and feed the report in::

    python -m pytest -m "not slow" --durations=0 -q > durations.txt
    python tests/update_slow_tests.py durations.txt            # tests over 0.7 s join the list

A test's time is its setup, call and teardown together (a module fixture's setup counts for the first test
that uses it). Listed tests stay listed (the quick run does not measure them); remove a line by hand when a
test got faster.

From the report of a whole run, ``--first-files 40`` prints instead the files whose tests took over 40 s
together, longest first: ``conftest.py``'s ``FIRST_FILES``, the files xdist hands out first.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

LIST = Path(__file__).with_name("slow_tests.txt")
#: a line of ``--durations`` output: seconds, phase, node id
DURATION = re.compile(r"^\s*(?P<seconds>[\d.]+)s (?:setup|call|teardown)\s+(?P<node>.+?)\s*$")


def durations(report: Path) -> dict[str, float]:
    """Seconds per node id (setup + call + teardown) in a ``--durations`` report."""
    total: dict[str, float] = defaultdict(float)
    for line in report.read_text(errors="replace").splitlines():
        match = DURATION.match(line)
        if match:
            total[match["node"]] += float(match["seconds"])
    return dict(total)


def file_totals(measured: dict[str, float]) -> dict[str, float]:
    """Seconds per test file (its tests' times together), longest first."""
    total: dict[str, float] = defaultdict(float)
    for node, seconds in measured.items():
        total[node.split("::")[0]] += seconds
    return dict(sorted(total.items(), key=lambda item: -item[1]))


def read_list(path: Path = LIST) -> list[str]:
    """The node ids of ``slow_tests.txt`` (comment and blank lines skipped)."""
    if not path.is_file():
        return []
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def main() -> None:
    """Command line: add the tests over ``--over`` seconds to the list."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="the output of pytest --durations=0")
    parser.add_argument("--over", type=float, default=0.7, help="seconds above which a test is slow (0.7)")
    parser.add_argument(
        "--first-files", type=float, metavar="SECONDS", help="print the files over SECONDS, longest first, and stop"
    )
    args = parser.parse_args()
    measured = durations(args.report)
    if args.first_files is not None:
        for path, seconds in file_totals(measured).items():
            if seconds > args.first_files:
                print(f'    "{path}",  # {seconds:.0f} s')
        return
    slow = {node for node, seconds in measured.items() if seconds > args.over}
    kept = set(read_list())
    header = [line for line in LIST.read_text().splitlines() if line.startswith("#")] if LIST.is_file() else []
    LIST.write_text("\n".join([*header, *sorted(slow | kept)]) + "\n")
    print(f"{len(slow | kept)} slow tests listed in {LIST} ({len(slow - kept)} new)")


if __name__ == "__main__":
    main()
