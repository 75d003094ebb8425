"""Landlock (Linux 5.13+), the confinement an unprivileged process can apply to itself without namespaces.

:func:`restrict` lets the calling process (and all it starts) read only the given paths, write only inside
its folder, and — where the kernel's Landlock ABI has them — neither connect nor bind TCP sockets (ABI 4)
nor signal processes outside its domain or reach abstract unix sockets (ABI 6). Landlock does not cover UDP,
and metadata calls (``chmod``, ``chown``, ``utime``) on paths it may not open are not refused.
"""

import ctypes
import os

import kernel

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
#: the rights of ABI 1: execute, write, read, read a directory, remove and make each kind of entry
ABI1_RIGHTS = (1 << 13) - 1
READ = EXECUTE | READ_FILE | READ_DIR
#: the rights that apply to a file (the others only to directories)
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is missing or disabled."""
    try:
        return kernel.syscall(kernel.LANDLOCK_CREATE_RULESET, None, 0, CREATE_RULESET_VERSION, what="landlock")
    except OSError:
        return 0


def filesystem_rights(version: int) -> int:
    """Every filesystem right the ABI ``version`` knows (all of them are handled, so all are denied by default)."""
    rights = ABI1_RIGHTS
    rights |= REFER if version >= 2 else 0
    rights |= TRUNCATE if version >= 3 else 0
    return rights | (IOCTL_DEV if version >= 5 else 0)


def restrict(read_only: list[str], devices: list[str], writable: list[str], version: int) -> None:
    """Confine this process for good: read (and execute) ``read_only``, read and write ``devices``, do
    anything inside ``writable``; nothing else. ``version`` is :func:`abi`; the process must be single-threaded."""
    handled = filesystem_rights(version)
    attr = _RulesetAttr(
        handled,
        NET_BIND_TCP | NET_CONNECT_TCP if version >= 4 else 0,
        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0,
    )
    size = 8 if version < 4 else 16 if version < 6 else 24
    ruleset = kernel.syscall(
        kernel.LANDLOCK_CREATE_RULESET, ctypes.byref(attr), size, 0, what="landlock_create_ruleset"
    )
    try:
        rules = [(p, READ) for p in read_only] + [(p, READ_FILE | WRITE_FILE) for p in devices]
        for path, access in rules + [(p, handled) for p in writable]:
            _allow(ruleset, path, access & handled)
        kernel.prctl(kernel.PR_SET_NO_NEW_PRIVS, 1)
        kernel.syscall(kernel.LANDLOCK_RESTRICT_SELF, ruleset, 0, what="landlock_restrict_self")
    finally:
        os.close(ruleset)


def _allow(ruleset: int, path: str, access: int) -> None:
    """Add the rule ``access`` beneath ``path`` (a file gets only the rights that apply to files)."""
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        if not os.path.isdir(path):
            access &= FILE_RIGHTS
        rule = _PathBeneath(access, fd)
        kernel.syscall(
            kernel.LANDLOCK_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), 0, what=f"landlock rule {path}"
        )
    finally:
        os.close(fd)
