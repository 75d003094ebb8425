"""Rank functions for ``test_ranks.py``, imported by name (not collected by pytest) so that the forked ranks can
unpickle them: they import nothing but the standard library, so what a rank finds in ``sys.modules`` when it
starts is what the fork server preloaded."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

#: the environment variables a test sets or removes around its spawns
VARIABLES = ("TESTKIT_RANKS_BEFORE", "TESTKIT_RANKS_AFTER")
#: modules a rank reports as already imported when it starts
PROBED = ("torch", "transformers.modeling_utils", "rlcore.workers.actor", "rlcore_plugin_fsdp.backend", "tabnanny")


def report(rank: int, out_dir: str) -> None:
    """Write ``rank<r>.json``: this process, its parent (the fork server), the server's thread count, which of
    :data:`PROBED` were imported before this function ran, and :data:`VARIABLES` as this rank sees them."""
    server = os.getppid()
    record = {
        "pid": os.getpid(),
        "server": server,
        "server_threads": len(os.listdir(f"/proc/{server}/task")),
        "preloaded": [name for name in PROBED if name in sys.modules],
        "environment": {name: os.environ.get(name) for name in VARIABLES},
        "cwd": os.getcwd(),
    }
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(record))


def read_reports(out_dir: str, nprocs: int) -> list[dict]:
    """The records :func:`report` wrote, in rank order."""
    return [json.loads(Path(out_dir, f"rank{rank}.json").read_text()) for rank in range(nprocs)]


def fail_on_rank_one(rank: int) -> None:
    """Rank 1 raises; rank 0 returns."""
    if rank == 1:
        raise ValueError("rank 1 cannot go on")


def say_hello(rank: int) -> None:
    """Print one line to standard output and one to standard error."""
    print(f"hello from rank {rank}", flush=True)
    print(f"warning from rank {rank}", file=sys.stderr, flush=True)
