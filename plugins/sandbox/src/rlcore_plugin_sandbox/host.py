"""What this host lets the sandbox enforce, found once per process and per ``RLCORE_SANDBOX_ISOLATION``.

Detection runs the real thing: a tiny program through the launcher in the strongest mode first
(``namespaces``: mount, PID, network, IPC and UTS namespaces, in a user namespace when not root), then
``landlock``, then ``none``, and keeps the first that works, with each failure's reason. It then knows which
user the programs run as, whether their process count can be capped, and whether a per-program cgroup can
be made. :meth:`HostIsolation.confinements` turns that into what is enforced, one row per resource.

``RLCORE_SANDBOX_ISOLATION`` caps the strongest mode tried: ``auto`` (the default), ``landlock`` (as on a
host without user namespaces) or ``none`` (as on a host with neither namespaces nor Landlock). These run the
same code as such hosts do, so the refusal of code rewards and of the code tool can be seen on any machine.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass, field
from importlib.util import find_spec

from rlcore.api import RLCoreError
from rlcore_plugin_sandbox import cgroups
from rlcore_plugin_sandbox.launch import SandboxError, execute
from rlcore_plugin_sandbox.limits import SandboxLimits

ISOLATION_ENV = "RLCORE_SANDBOX_ISOLATION"
#: the modes, strongest first
MODES = ("namespaces", "landlock", "none")
#: what ``RLCORE_SANDBOX_ISOLATION`` may say, and the first mode each tries
CHOICES = {"auto": "namespaces", "landlock": "landlock", "none": "none"}
#: the rows that must all be enforced for the level to be ``full``
BOUNDARY = ("reads", "writes", "folder size", "processes", "process count", "memory", "network", "privileges")
#: (resource, mode) -> (enforced, how) for the files it reads and the size of its folder
FILE_CONFINEMENT = {
    ("reads", "namespaces"): (True, "mount namespace: the interpreter, system libraries and its folder only"),
    ("reads", "landlock"): (True, "Landlock: the interpreter, system libraries and its folder only"),
    ("reads", "none"): (False, "every file the program's user may read"),
    ("folder size", "namespaces"): (True, "a tmpfs of folder_mb (and 256 files per MB): writes past it fail"),
    ("folder size", "landlock"): (
        True,
        "a watchdog stops the program once its folder holds more than folder_mb (checked every 10 ms: it may "
        "write more in between)",
    ),
    ("folder size", "none"): (False, "the watchdog of its folder, but it may write elsewhere"),
}
#: what Landlock does not cover, in the writes row of a program whose user owns files of the host
LANDLOCK_UNCOVERED = "chmod, chown, utime and extended attributes (ACLs too) of files outside its folder"
_PROBE_LIMITS = SandboxLimits(cpu_seconds=5, wall_seconds=20, memory_mb=256)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Confinement:
    """One resource: whether the kernel enforces its bound on this host, and how (or why not)."""

    name: str
    enforced: bool
    how: str


@dataclass(frozen=True)
class HostIsolation:
    """How sandboxed programs are confined on this host.

    Attributes:
        mode: ``namespaces``, ``landlock`` or ``none``: the strongest confinement that works here.
        requested: the value of ``RLCORE_SANDBOX_ISOLATION`` (``auto`` when unset).
        unavailable: the stronger modes that were not used, each with why.
        info: the launcher's facts: ``landlock-abi``, ``user`` (``own``: a user id of its own for each
            program; ``caller``: the caller's; ``root-without-capabilities``), ``uid``, ``variant``
            (``root`` or ``user`` namespaces), ``process-limit``.
        notes: what the launcher could not provide (``/proc`` in some containers).
        cgroups: where per-program cgroups are made; ``None`` with ``cgroup_reason`` when they cannot be.
    """

    mode: str
    requested: str
    unavailable: dict[str, str] = field(default_factory=dict)
    info: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    cgroups: cgroups.Layout | None = None
    cgroup_reason: str = ""

    @property
    def landlock_abi(self) -> int:
        """The kernel's Landlock ABI version (0: none)."""
        return int(self.info.get("landlock-abi", 0))

    @property
    def level(self) -> str:
        """``full`` when every boundary row is enforced by the kernel, ``none`` without kernel isolation,
        else ``partial``."""
        if self.mode == "none":
            return "none"
        rows = {row.name: row.enforced for row in self.confinements()}
        return "full" if all(rows[name] for name in BOUNDARY) else "partial"

    def missing(self) -> list[Confinement]:
        """The boundary rows the kernel does not enforce here."""
        return [row for row in self.confinements() if row.name in BOUNDARY and not row.enforced]

    def confinements(self) -> list[Confinement]:
        """One row per resource: reads, writes, folder size, processes, process count, memory, network, time,
        privileges, then the two layers that are not a boundary (seccomp, the audit hook). Memory is enforced
        only with a per-program memory cgroup: ``RLIMIT_AS`` does not count the kernel's pipe and socket
        buffers, which one process can fill with many times ``memory_mb``."""
        namespaces = self.mode == "namespaces"
        abi, user = self.landlock_abi, self.info.get("user", "")
        counted = user == "own" or namespaces
        if self.cgroups is not None:
            count = Confinement("process count", True, "pids cgroup: max_processes for the whole program")
        elif counted:
            count = Confinement("process count", True, "RLIMIT_NPROC: max_processes (its user id counts only its own)")
        else:
            count = Confinement("process count", False, _uncounted(user))
        if self.cgroups is not None:
            memory = Confinement(
                "memory",
                True,
                "memory cgroup: memory_mb for all its processes together, swap and pipe and socket buffers included",
            )
        else:
            memory = Confinement(
                "memory",
                False,
                "RLIMIT_AS: memory_mb per process, which does not count the kernel's pipe and socket buffers "
                f"(no per-program cgroup: {self.cgroup_reason or 'none was tried'})",
            )
        return [
            Confinement("reads", *FILE_CONFINEMENT["reads", self.mode]),
            _writes(self.mode, user, self.info.get("uid", "?")),
            Confinement("folder size", *FILE_CONFINEMENT["folder size", self.mode]),
            _processes(self.mode, abi, user),
            count,
            memory,
            _network(self.mode, abi),
            Confinement("time", True, "RLIMIT_CPU per process; at wall_seconds every process is killed"),
            _privileges(self.mode, user, self.info.get("uid", "?")),
            Confinement("seccomp", False, _seccomp()),
            Confinement(
                "audit hook",
                True,
                "names refused sockets, processes, signals, native code and writes outside the folder",
            ),
        ]

    def summary(self) -> str:
        """One line: the level, the mode and what is not enforced."""
        mechanism = {
            "namespaces": "namespaces",
            "landlock": f"Landlock ABI {self.landlock_abi}",
            "none": "no kernel isolation",
        }
        missing = ", ".join(row.name for row in self.missing())
        causes = "".join(f"; {cause}" for cause in fallbacks(self))
        return f"{self.level} ({mechanism[self.mode]}{'; not enforced: ' + missing if missing else ''}{causes})"


def fallbacks(host: HostIsolation) -> list[str]:
    """Why ``host`` confines less than it was asked to: each stronger mode that failed (not one that
    ``RLCORE_SANDBOX_ISOLATION`` left out), and the per-program cgroup that could not be made."""
    capped = f"{ISOLATION_ENV}={host.requested}"
    causes = [f"{mode} failed: {reason}" for mode, reason in host.unavailable.items() if reason != capped]
    if host.cgroups is None:
        causes.append(f"no per-program cgroup: {host.cgroup_reason}")
    return causes


def _writes(mode: str, user: str, uid: str) -> Confinement:
    if mode == "namespaces":
        return Confinement("writes", True, "mount namespace: its folder and /tmp (a tmpfs); all else read-only")
    if mode == "none":
        return Confinement("writes", False, "the audit hook only (a Python-level layer)")
    if user == "own":
        return Confinement("writes", True, f"Landlock: its folder only ({LANDLOCK_UNCOVERED}: it owns none)")
    return Confinement(
        "writes",
        False,
        f"Landlock: its folder only, but not {LANDLOCK_UNCOVERED}: as uid {uid} it may change those of every "
        "file that user owns",
    )


def _processes(mode: str, abi: int, user: str) -> Confinement:
    if mode == "namespaces":
        return Confinement("processes", True, "PID namespace: all its processes die with its init, setsid or not")
    if user == "own" or (mode == "landlock" and abi >= 6):
        return Confinement("processes", True, "child subreaper: every descendant is killed when it ends")
    return Confinement("processes", False, "child subreaper, but the program may kill the launcher (same user)")


def _network(mode: str, abi: int) -> Confinement:
    if mode == "namespaces":
        return Confinement("network", True, "network namespace: a loopback interface, down")
    if mode == "landlock" and abi >= 4:
        return Confinement("network", False, "Landlock: TCP connect/bind refused; UDP and unix sockets are not")
    return Confinement("network", False, "the audit hook only (a Python-level layer)")


def _privileges(mode: str, user: str, uid: str) -> Confinement:
    if user == "own":
        return Confinement("privileges", True, f"user id {uid} of its own, no capabilities, no_new_privs")
    if user == "caller" and mode == "namespaces":
        return Confinement("privileges", True, "the caller's user in a user namespace, no capabilities")
    if user == "caller":
        return Confinement("privileges", True, "the caller's user, no_new_privs")
    return Confinement("privileges", True, "uid 0 without capabilities (no other user can reach the interpreter)")


def _uncounted(user: str) -> str:
    if user == "root-without-capabilities":
        return "RLIMIT_NPROC does not apply to uid 0"
    return "RLIMIT_NPROC would count all of the user's processes without a user namespace"


def _seccomp() -> str:
    if find_spec("seccomp") is None and find_spec("pyseccomp") is None:
        return "not used: no Python binding of libseccomp (seccomp, pyseccomp) is installed"
    return "not used: the namespaces and rlimits above are the boundary"


def requested_isolation() -> str:
    """``RLCORE_SANDBOX_ISOLATION`` (``auto`` when unset); an unknown value is an error naming the variable."""
    value = os.environ.get(ISOLATION_ENV, "").strip().lower() or "auto"
    if value not in CHOICES:
        raise RLCoreError(f"{ISOLATION_ENV}={value!r}: expected one of {', '.join(CHOICES)}")
    return value


def host_isolation() -> HostIsolation:
    """How this host confines sandboxed programs (detected on first use, then cached per process)."""
    return _detect(requested_isolation())


@functools.cache
def _detect(requested: str) -> HostIsolation:
    layout, cgroup_reason = cgroups.probe()
    first = MODES.index(CHOICES[requested])
    unavailable = {mode: f"{ISOLATION_ENV}={requested}" for mode in MODES[:first]}
    for mode in MODES[first:]:
        try:
            execution = execute(mode, "pass", "", _PROBE_LIMITS, layout, audit=True)
        except SandboxError as error:
            if layout is None:
                unavailable[mode] = str(error)
                continue
            try:  # without the cgroup: is it the cgroup that fails here?
                execution = execute(mode, "pass", "", _PROBE_LIMITS, None, audit=True)
            except SandboxError:
                unavailable[mode] = str(error)
                continue
            layout, cgroup_reason = None, str(error)
        if execution.exit_code != 0:
            unavailable[mode] = f"a probe program failed: {execution.stderr.text().strip()[-300:]}"
            continue
        notes = tuple(execution.reported("note"))
        host = HostIsolation(mode, requested, unavailable, execution.info(), notes, layout, cgroup_reason)
        causes = fallbacks(host)
        if causes:
            log.warning("sandbox: %s confines programs less than it could: %s", mode, "; ".join(causes))
        return host
    raise SandboxError(
        "the sandbox cannot run a program on this host: " + "; ".join(f"{m}: {r}" for m, r in unavailable.items())
    )
