"""Settings a run makes to its own process before training starts: quiet third-party libraries, and torch's
CPU threads kept within the cores the process may use.

- transformers and accelerate import DeepSpeed whenever it is installed (``save_pretrained`` does), and
  DeepSpeed then guesses its accelerator and prints "Setting accelerator to CPU ..." on stdout: naming the
  accelerator in ``DS_ACCELERATOR`` (``cpu`` or ``cuda``, from ``trainer.device``) makes it quiet; a value
  already set is kept. Hugging Face's download/shard bars are turned off (``HF_HUB_DISABLE_PROGRESS_BARS``).
- torch starts as many intra-op threads as there are cores it sees. A small model's operations are too
  small to share: the bundled task's 40 steps took 124 s with torch's two threads and 36 s with one, on the
  same shared 2-core machine (the bundled presets set ``trainer.cpu_threads=1``). And a container limited
  by a CPU quota (cgroup ``cpu.max``) sees every CPU of the host, so that many threads wait on each other
  on a few cores' quota at every operation. :func:`set_cpu_threads` applies ``trainer.cpu_threads``, or
  lowers torch's default to the cores the process may use (:func:`usable_cpus`) unless
  ``OMP_NUM_THREADS`` is set.
- A worker of a pinned lane (``trainer.lane_cpus``, :mod:`rlcore.config.lanes`) runs on its pool's cores:
  :func:`pin_process` pins every thread of the process and sets torch's threads before any torch work.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

#: cgroup v2 and v1 files that hold a CPU quota
_CGROUP_V2 = Path("/sys/fs/cgroup/cpu.max")
_CGROUP_V1 = (Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))


def cpu_quota(v2: Path = _CGROUP_V2, v1: tuple[Path, Path] = _CGROUP_V1) -> int | None:
    """The cores a cgroup CPU quota allows (rounded up), or None without a quota."""
    try:
        if v2.is_file():
            quota, period = v2.read_text().split()[:2]
            return None if quota == "max" else max(1, math.ceil(int(quota) / int(period)))
        if v1[0].is_file() and v1[1].is_file():
            quota_us, period_us = int(v1[0].read_text()), int(v1[1].read_text())
            return None if quota_us <= 0 else max(1, math.ceil(quota_us / period_us))
    except (OSError, ValueError):
        return None
    return None


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity), fewer when a cgroup quota allows fewer."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    quota = cpu_quota()
    return min(cpus, quota) if quota is not None else cpus


def cpu_threads_setting(config: Any) -> int | None:
    """``trainer.cpu_threads`` of a run's config: None, or a positive int (else a ``ConfigError`` naming the
    key)."""
    from rlcore.config.keys import positive_int

    threads = config.trainer.cpu_threads
    return None if threads is None else positive_int(threads, "trainer.cpu_threads")


def set_cpu_threads(threads: int | None) -> int:
    """Set torch's intra-op threads: ``threads`` when given (``trainer.cpu_threads``); otherwise
    ``OMP_NUM_THREADS`` stands when set, and torch's default is lowered to :func:`usable_cpus`. Returns the
    thread count torch uses."""
    import torch

    if threads:
        torch.set_num_threads(int(threads))
    elif "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(min(torch.get_num_threads(), usable_cpus()))
    return torch.get_num_threads()


def pin_process(cpus: frozenset[int], threads: int) -> int:
    """Pin every thread of this process to ``cpus`` (threads started later inherit it) and run ``threads``
    torch threads (``OMP_NUM_THREADS`` too, for libraries and processes started later). Returns torch's thread
    count. Linux only (``os.sched_setaffinity``)."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    tasks = Path("/proc/self/task")
    for tid in [int(entry.name) for entry in tasks.iterdir()] if tasks.is_dir() else [0]:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:  # the thread ended meanwhile
            continue
    return set_cpu_threads(threads)


def quiet_third_party(device: str) -> None:
    """Set ``DS_ACCELERATOR`` for ``trainer.device`` (``auto``: ``cuda`` when torch sees a GPU; ``cpu`` without
    torch, on a lean install whose run the config checks then stop naming what to install) and turn off Hugging
    Face's progress bars, unless already set."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "DS_ACCELERATOR" in os.environ:
        return
    if device == "auto":
        try:
            import torch
        except ImportError:
            device = "cpu"
        else:
            device = "cuda" if torch.cuda.is_available() else "cpu"
    os.environ["DS_ACCELERATOR"] = "cuda" if str(device).startswith("cuda") else "cpu"
