"""Per-call cost of the sandbox: wall time of ``run_python("print(1)")`` in each isolation mode.

Code rewards call the sandbox once per test case, so its fixed cost matters. For each mode of
``--modes`` (``namespaces``, ``landlock``, ``none``: ``RLCORE_SANDBOX_ISOLATION`` caps the mode; a mode the
host does not offer is reported as unavailable) it times ``--calls`` calls after two warm-up calls, and for
reference the same program in a bare ``python -I -c`` subprocess, with the load average around the runs.
Prints one JSON object: per mode the median, min and 90th percentile in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

MODES = ("namespaces", "landlock", "none")


def timings(call: Callable[[], object], calls: int) -> dict[str, float]:
    """Median, min and 90th percentile (ms) of ``calls`` calls after two warm-up calls."""
    for _ in range(2):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {
        "median_ms": round(statistics.median(times), 1),
        "min_ms": round(times[0], 1),
        "p90_ms": round(times[int(0.9 * (len(times) - 1))], 1),
    }


def main() -> None:
    """Parse the arguments, time each mode, print the JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30, help="timed calls per mode (default 30)")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes (default all)")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if args.calls < 1 or unknown:
        print(f"error: --calls must be >= 1 and --modes one of {', '.join(MODES)} (got {unknown or args.calls})")
        sys.exit(2)
    from rlcore_plugin_sandbox import host_isolation, run_python

    result: dict[str, object] = {"load_before": os.getloadavg()[0]}
    for mode in modes:
        os.environ["RLCORE_SANDBOX_ISOLATION"] = mode
        host = host_isolation()
        if host.mode != mode:
            result[mode] = {"unavailable": host.unavailable.get(mode, "")}
            continue
        print(f"{mode}: {host.summary()}", file=sys.stderr)
        result[mode] = timings(lambda: run_python("print(1)", allow_unconfined=True), args.calls)
    bare = [sys.executable, "-I", "-c", "print(1)"]
    result["bare_interpreter"] = timings(lambda: subprocess.run(bare, capture_output=True, check=True), args.calls)
    result["load_after"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
