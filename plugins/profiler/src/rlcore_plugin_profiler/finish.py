"""What happens when a profiled step's traces are written: ``global_profiler.relocate_results`` moves the
rollout engine's traces next to the training ones, and after the run's last profiled step
``global_profiler.finish_hook_cmd`` runs once on each selected rank.

The hook runs through ``/bin/sh -c`` with verl's variables: ``VERL_PROFILE_SAVE_PATH`` (``save_path``),
``VERL_PROFILE_TOOL``, ``VERL_PROFILE_RANK``, ``VERL_PROFILE_PID`` and ``VERL_PROFILE_ROLE`` (the worker
group, e.g. ``actor_rollout``). Its output goes to the log; a command that fails, or cannot start, is
reported with its exit status and the end of its output, and the run goes on.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["relocate_rollout_traces", "rollout_trace_dir", "run_finish_hook"]

log = logging.getLogger(__name__)

#: how much of the hook's output a report shows
OUTPUT_TAIL = 2000


def rollout_trace_dir(save_path: str | Path, rank: int) -> Path:
    """The folder the rollout engine of replica ``rank`` writes its traces into (verl's layout)."""
    return Path(save_path) / f"agent_loop_rollout_replica_{rank}"


def relocate_rollout_traces(save_path: str | Path, rank: int, folder: Path) -> list[str]:
    """Move every file of replica ``rank``'s engine folder into ``folder`` (the step's folder), renamed
    ``rollout-replica{rank}_{name}``; the new paths. A file that cannot be moved is reported and stays."""
    source = rollout_trace_dir(save_path, rank)
    if not source.is_dir():
        return []
    folder.mkdir(parents=True, exist_ok=True)
    moved = []
    for path in sorted(p for p in source.iterdir() if p.is_file()):
        target = folder / f"rollout-replica{rank}_{path.name}"
        try:
            shutil.move(str(path), str(target))
        except OSError as exc:
            log.warning("global_profiler.relocate_results: could not move %s to %s: %s", path, target, exc)
            continue
        moved.append(str(target))
    return moved


def run_finish_hook(cmd: str, *, save_path: str, tool: str, rank: int, role: str) -> bool:
    """Run ``global_profiler.finish_hook_cmd`` through the shell with the ``VERL_PROFILE_*`` variables;
    whether it exited 0 (a failure is logged, never raised)."""
    env = {
        **os.environ,
        "VERL_PROFILE_SAVE_PATH": str(save_path),
        "VERL_PROFILE_TOOL": tool,
        "VERL_PROFILE_RANK": str(rank),
        "VERL_PROFILE_PID": str(os.getpid()),
        "VERL_PROFILE_ROLE": role,
    }
    where = f"{role} rank {rank}"
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", cmd], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False
        )
    except OSError as exc:
        log.warning("global_profiler.finish_hook_cmd could not start on %s: %r: %s", where, cmd, exc)
        return False
    output = done.stdout[-OUTPUT_TAIL:]
    if done.returncode != 0:
        log.warning(
            "global_profiler.finish_hook_cmd failed on %s with exit status %d: %r; the traces stay in %s. Output:\n%s",
            where,
            done.returncode,
            cmd,
            save_path,
            output,
        )
        return False
    log.info("global_profiler.finish_hook_cmd ran on %s: %r. Output:\n%s", where, cmd, output)
    return True
