"""``rlcore sandbox check``: what the kernel enforces for sandboxed programs on this host, each claim tried.

Besides the table of :meth:`~rlcore_plugin_sandbox.host.HostIsolation.confinements`, it runs hostile probes with the
audit hook off (so that only the kernel stands in their way): read a secret planted outside, write into a
folder anyone may write and change the mode, times and extended attributes of a file of this process's user
there, write 8 MB with ``folder_mb=1``, hold twice ``memory_mb`` in pipe and socket buffers, reach a TCP and
a UDP socket this process listens on, leave a ``setsid`` process behind, fork past ``max_processes``, use a
capability. A probe that gets through where the table says
the kernel stops it is a failure of the sandbox: the command then exits with status 1.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import click

from rlcore_plugin_sandbox.host import HostIsolation, host_isolation
from rlcore_plugin_sandbox.limits import SandboxLimits
from rlcore_plugin_sandbox.runner import run_python

PROBE_LIMITS = SandboxLimits(cpu_seconds=2, wall_seconds=3, memory_mb=256, max_processes=8)
#: a probe: the code's result (``True``: stopped, ``False``: it got through)
Probe = Callable[[], bool]


def _run(code: str, limits: SandboxLimits = PROBE_LIMITS) -> str:
    """The probe program's stdout, run by the kernel's confinement alone."""
    return run_python(code, limits=limits, allow_unconfined=True, audit_hook=False).stdout


def probe_reads() -> bool:
    """A file anyone may read, outside the program's folder, stays unread."""
    with tempfile.TemporaryDirectory(prefix="rlcore-check-") as folder:
        os.chmod(folder, 0o755)
        secret = Path(folder, "secret.txt")
        secret.write_text("secret")
        secret.chmod(0o644)
        return "secret" not in _run(f"try:\n    print(open({str(secret)!r}).read())\nexcept OSError:\n    pass")


def probe_writes() -> bool:
    """A folder anyone may write, outside the program's folder, gets no file, and a file of this process's user
    there keeps its mode, times and extended attributes."""
    with tempfile.TemporaryDirectory(prefix="rlcore-check-") as folder:
        os.chmod(folder, 0o777)
        owned = Path(folder, "owned.txt")
        owned.write_text("x")
        owned.chmod(0o644)
        before = owned.stat()
        code = f"""
import os
for attempt in (
    lambda: open({str(Path(folder, "new.txt"))!r}, "w").write("x"),
    lambda: os.chmod({str(owned)!r}, 0o666),
    lambda: os.utime({str(owned)!r}, (0, 0)),
    lambda: os.setxattr({str(owned)!r}, "user.rlcore", b"1"),
):
    try:
        attempt()
    except OSError:
        pass
"""
        _run(code)
        after = owned.stat()
        try:
            attributes = os.listxattr(owned)
        except OSError:  # a file system without extended attributes
            attributes = []
        same = (after.st_mode, after.st_mtime_ns) == (before.st_mode, before.st_mtime_ns)
        return os.listdir(folder) == ["owned.txt"] and same and "user.rlcore" not in attributes


def probe_folder_size() -> bool:
    """A program that writes 8 MB with ``folder_mb=1`` keeps at most 1 MB (or is stopped)."""
    code = """
import time
written = 0
try:
    for part in range(8):
        with open(f"part{part}", "wb") as handle:
            handle.write(b"x" * (1 << 20))
        written += 1
except OSError:
    pass
time.sleep(0.5)
print(written)
"""
    out = _run(code, replace(PROBE_LIMITS, file_mb=1, folder_mb=1)).strip()
    return not out or (out.isdigit() and int(out) <= 1)


def kernel_buffer_hog(cap_mb: int) -> str:
    """Python that fills pipes and socket pairs (their kernel buffers, which no address-space limit counts)
    until they hold ``cap_mb`` MB or no more fit, then prints how many MB they held."""
    return f"""
import fcntl, os, socket
held, kept, chunk = 0, [], b"x" * 65536
def fill(fd):
    global held
    os.set_blocking(fd, False)
    while held < {cap_mb << 20}:
        try:
            held += os.write(fd, chunk)
        except OSError:
            return
try:
    while held < {cap_mb << 20}:
        reader, writer = os.pipe()
        kept.append((reader, writer))
        try:
            fcntl.fcntl(writer, 1031, 1 << 20)  # F_SETPIPE_SZ: 1 MB, the most an unprivileged user may ask
        except OSError:
            pass
        fill(writer)
        pair = socket.socketpair()
        kept.append(pair)
        for end in pair:
            try:
                end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 24)
            except OSError:
                pass
            fill(end.fileno())
except OSError:
    pass
print(held >> 20)
"""


def probe_memory() -> bool:
    """Pipes and socket pairs filled by a program with ``memory_mb=64`` do not hold twice that."""
    out = _run(kernel_buffer_hog(128), replace(PROBE_LIMITS, memory_mb=64)).strip()
    return not out.isdigit() or int(out) < 128


def probe_network() -> bool:
    """Neither a TCP connection nor a UDP datagram reaches sockets this process listens on (127.0.0.1)."""
    with socket.socket() as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(1)
        udp.bind(("127.0.0.1", 0))
        code = f"""
import socket
try:
    socket.create_connection({tcp.getsockname()!r}, timeout=1).send(b"x")
except OSError:
    pass
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", {udp.getsockname()!r})
except OSError:
    pass
"""
        _run(code)
        tcp.setblocking(False)
        udp.setblocking(False)
        for sock in (tcp, udp):
            try:
                sock.accept() if sock is tcp else sock.recv(1)
                return False
            except BlockingIOError:
                continue
        return True


def setsid_sleeper(marker: str) -> str:
    """Python that starts a ``setsid`` process sleeping ``MARKER`` seconds (its command line holds the
    marker) and leaves it behind."""
    return f"""
import os, sys
if os.fork() == 0:
    os.setsid()
    os.execv(sys.executable, [sys.executable, "-S", "-c", "import time; time.sleep({marker})"])
"""


def still_running(marker: str) -> bool:
    """Whether a process of this host has ``marker`` in its command line."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def probe_processes() -> bool:
    """A ``setsid`` grandchild is gone when the call returns."""
    marker = f"{uuid.uuid4().int % 10**9}.75"
    _run(setsid_sleeper(marker))
    return not still_running(marker)


def probe_process_count() -> bool:
    """A fork bomb gets fewer than ``max_processes`` processes."""
    code = """
import os, time
count = 0
while count < 64:
    try:
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
    except OSError:
        break
    count += 1
print(count)
"""
    out = _run(code).strip()
    return out.isdigit() and int(out) < PROBE_LIMITS.max_processes


def probe_privileges() -> bool:
    """The program can neither change its user or groups nor give a file away (each needs a capability)."""
    code = """
import os
for attempt in (lambda: os.setuid(12345), lambda: os.setgroups([]), lambda: os.chown("main.py", 12345, 12345)):
    try:
        attempt()
        print("kept")
    except OSError:  # EPERM, or EINVAL for a user id a user namespace does not map
        print("refused")
"""
    return _run(code).split() == ["refused"] * 3


PROBES: dict[str, Probe] = {
    "reads": probe_reads,
    "writes": probe_writes,
    "folder size": probe_folder_size,
    "memory": probe_memory,
    "network": probe_network,
    "processes": probe_processes,
    "process count": probe_process_count,
    "privileges": probe_privileges,
}


def check_report(host: HostIsolation) -> dict:
    """The detection and each probe's outcome, as ``rlcore sandbox check --json`` prints it."""
    rows = []
    for row in host.confinements():
        probe = PROBES.get(row.name)
        verified = None if probe is None else probe()
        rows.append({"name": row.name, "enforced": row.enforced, "verified": verified, "how": row.how})
    return {
        "level": host.level,
        "mode": host.mode,
        "requested": host.requested,
        "unavailable": host.unavailable,
        "info": host.info,
        "notes": list(host.notes),
        "cgroups": None if host.cgroups is None else {"version": host.cgroups.version, "memory": host.cgroups.memory},
        "cgroup_reason": host.cgroup_reason,
        "confinements": rows,
        "contradictions": [r["name"] for r in rows if r["enforced"] and r["verified"] is False],
    }


def _table(report: dict) -> str:
    words = {True: "yes", False: "no", None: "-"}
    lines = [f"{'CONFINEMENT':<14} {'ENFORCED':<9} {'VERIFIED':<9} HOW"]
    for row in report["confinements"]:
        lines.append(f"{row['name']:<14} {words[row['enforced']]:<9} {words[row['verified']]:<9} {row['how']}")
    lines.append("")
    lines.append(f"level: {report['level']} (mode {report['mode']}; RLCORE_SANDBOX_ISOLATION={report['requested']})")
    lines += [f"not used: {mode}: {why}" for mode, why in report["unavailable"].items()]
    if report["cgroup_reason"]:
        lines.append(f"no per-program cgroup: {report['cgroup_reason']}")
    lines += [f"note: {note}" for note in report["notes"]]
    return "\n".join(lines)


def check_command(as_json: bool, strict: bool) -> None:
    """Print the report; exit 1 when a probe got through what the kernel should stop, or (``strict``) when
    the level is not ``full``."""
    started = time.perf_counter()
    report = check_report(host_isolation())
    report["seconds"] = round(time.perf_counter() - started, 2)
    click.echo(json.dumps(report, indent=2) if as_json else _table(report))
    if report["contradictions"]:
        click.echo(f"error: the kernel did not stop these probes: {', '.join(report['contradictions'])}", err=True)
        sys.exit(1)
    if strict and report["level"] != "full":
        sys.exit(1)
