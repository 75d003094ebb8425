"""Per-program cgroups: one bound on the memory and one on the number of processes of a program's whole tree.

Where this process may create child cgroups of its own (cgroup v1 ``memory`` and ``pids`` hierarchies, or
a cgroup v2 directory that delegates both controllers), each program gets a fresh cgroup with
``memory_mb`` (swap included) and ``max_processes`` as limits; its processes join it before they exec, and it
is removed afterwards. Elsewhere the launcher's per-process rlimits are the only bound.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from dataclasses import dataclass

from rlcore.api import process_exists
from rlcore_plugin_sandbox.jail.cgroup_folder import remove_when_empty

#: a program's cgroup is named ``rlcore-sandbox-<pid of the process that made it>-<8 hex digits>``
PREFIX = "rlcore-sandbox-"
_NAME = re.compile(re.escape(PREFIX) + r"(\d+)-[0-9a-f]{8}")

#: per version: (memory limit file, swap limit file, file with the ``oom_kill`` count, processes file)
_FILES = {
    1: ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.oom_control", "cgroup.procs"),
    2: ("memory.max", "memory.swap.max", "memory.events", "cgroup.procs"),
}


@dataclass(frozen=True)
class Layout:
    """Where this process's cgroups are: the ``memory`` and the ``pids`` directory (the same one in v2)."""

    version: int
    memory: str
    pids: str


def find_layout() -> tuple[Layout | None, str]:
    """This process's cgroup directories, or ``None`` and why there are none to use."""
    try:
        with open("/proc/self/mountinfo") as handle:
            mounts = [line.split(" - ") for line in handle.read().splitlines()]
        with open("/proc/self/cgroup") as handle:
            groups = [line.split(":", 2) for line in handle.read().splitlines()]
    except OSError as error:
        return None, f"cannot read this process's cgroups ({error})"
    v1: dict[str, str] = {}
    v2 = None
    for head, tail in (m for m in mounts if len(m) == 2):
        fstype, _source, options = (tail.split() + ["", ""])[:3]
        point = head.split()[4]
        if fstype == "cgroup":
            for controller in ("memory", "pids"):
                if controller in options.split(","):
                    v1[controller] = point
        elif fstype == "cgroup2":
            v2 = point
    paths = {name: path for _, names, path in groups for name in names.split(",")}
    if "memory" in v1 and "pids" in v1 and "memory" in paths and "pids" in paths:
        return Layout(1, v1["memory"] + paths["memory"], v1["pids"] + paths["pids"]), ""
    if v2 is not None and "" in paths:
        folder = v2 + paths[""]
        return Layout(2, folder, folder), ""
    return None, "no cgroup v1 memory and pids hierarchies and no cgroup v2 mount"


class Cgroup:
    """The cgroup(s) of one program, created with its limits; :meth:`remove` deletes them."""

    def __init__(self, layout: Layout, memory_bytes: int, processes: int) -> None:
        """Create the cgroups under ``layout`` with these limits (an :class:`OSError` when not allowed)."""
        self.version = layout.version
        name = f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.memory = os.path.join(layout.memory, name)
        self.pids = os.path.join(layout.pids, name)
        self.folders = sorted({self.memory, self.pids})
        memory_file, swap_file, _, _ = _FILES[self.version]
        try:
            for folder in self.folders:
                os.mkdir(folder)
            _write(os.path.join(self.memory, memory_file), str(memory_bytes))
            swap = os.path.join(self.memory, swap_file)
            if os.path.exists(swap):
                _write(swap, str(memory_bytes) if self.version == 1 else "0")
            _write(os.path.join(self.pids, "pids.max"), str(processes))
        except OSError:
            self.remove()
            raise

    @property
    def procs(self) -> list[str]:
        """The files a process writes ``0`` to, to join these cgroups."""
        return [os.path.join(folder, _FILES[self.version][3]) for folder in self.folders]

    def oom_kills(self) -> int:
        """How many processes the kernel killed at the memory limit."""
        try:
            with open(os.path.join(self.memory, _FILES[self.version][2])) as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def remove(self, wait_seconds: float = 2.0) -> None:
        """Delete the cgroups, waiting up to ``wait_seconds`` for their last processes to be gone."""
        deadline = time.monotonic() + wait_seconds
        for folder in self.folders:
            remove_when_empty(folder, deadline)


def _write(path: str, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def sweep_stale(layout: Layout) -> list[str]:
    """Remove the empty program cgroups under ``layout`` whose maker is no longer running (a caller killed before
    it could remove them), and return their paths. A cgroup of a live process, or one that still holds
    processes, is left alone."""
    removed = []
    for parent in sorted({layout.memory, layout.pids}):
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            match = _NAME.fullmatch(name)
            if match is None or process_exists(int(match.group(1))):
                continue
            try:
                os.rmdir(os.path.join(parent, name))
            except OSError:
                continue
            removed.append(os.path.join(parent, name))
    return removed


def probe() -> tuple[Layout | None, str]:
    """The layout if a program's cgroup can be created and limited here, else ``None`` and why not. Program
    cgroups that dead callers left behind are removed first (:func:`sweep_stale`)."""
    layout, reason = find_layout()
    if layout is None:
        return None, reason
    sweep_stale(layout)
    try:
        Cgroup(layout, 64 << 20, 8).remove()
    except OSError as error:
        return None, f"cannot create a cgroup under {layout.memory} ({error.strerror or error})"
    return layout, ""
