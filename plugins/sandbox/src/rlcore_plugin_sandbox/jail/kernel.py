"""The Linux system calls the launcher needs that Python 3.11's ``os`` module lacks (``unshare``, ``mount``,
``pivot_root``, ``prctl``, the Landlock calls), called through the C library with ``ctypes``.

Each wrapper raises :class:`OSError` naming the call on failure. Only the launcher, which is trusted code,
imports this module; the sandboxed program never sees ``ctypes``.
"""

import ctypes
import os

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_RELATIME = 0x200000
MNT_DETACH = 0x2

PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

#: securebits: uid 0 gains no capability at exec, and no ambient capability may be raised; both locked
SECURE_NO_ROOT = (1 << 0) | (1 << 1) | (1 << 6) | (1 << 7)
_CAPABILITY_VERSION_3 = 0x20080522

#: system call numbers that differ between architectures (the Landlock calls are the same everywhere)
_SYSCALLS = {
    "x86_64": {"pivot_root": 155},
    "aarch64": {"pivot_root": 41},
    "arm64": {"pivot_root": 41},
    "riscv64": {"pivot_root": 41},
    "ppc64le": {"pivot_root": 203},
    "s390x": {"pivot_root": 217},
}
LANDLOCK_CREATE_RULESET = 444
LANDLOCK_ADD_RULE = 445
LANDLOCK_RESTRICT_SELF = 446

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _check(result: int, what: str) -> int:
    """``result`` unless it is -1, else the C library's errno as an :class:`OSError` naming ``what``."""
    if result == -1:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def unshare(flags: int) -> None:
    """Move this process into new namespaces (``CLONE_NEW*`` flags)."""
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """``mount(2)``."""
    encode = lambda text: None if text is None else os.fsencode(text)  # noqa: E731 - a one-line helper
    result = _libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data))
    _check(result, f"mount {source or ''} on {target}")


def umount(target: str, flags: int = 0) -> None:
    """``umount2(2)``."""
    _check(_libc.umount2(os.fsencode(target), ctypes.c_int(flags)), f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    """``pivot_root(2)`` (the C library has no wrapper)."""
    number = _SYSCALLS.get(os.uname().machine, {}).get("pivot_root")
    if number is None:
        raise OSError(38, f"pivot_root: unknown system call number on {os.uname().machine}")
    _check(_libc.syscall(ctypes.c_long(number), os.fsencode(new_root), os.fsencode(put_old)), "pivot_root")


def prctl(option: int, value: int) -> None:
    """``prctl(option, value, 0, 0, 0)``."""
    zero = ctypes.c_ulong(0)
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(value), zero, zero, zero), f"prctl {option}")


def syscall(number: int, *args: object, what: str) -> int:
    """A raw system call with integer or pointer arguments."""
    return _check(int(_libc.syscall(ctypes.c_long(number), *args)), what)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Give up every capability for good, while keeping the user id (root without privileges): securebits
    so that exec grants none back, an empty bounding set, then empty capability sets."""
    prctl(PR_SET_SECUREBITS, SECURE_NO_ROOT)
    for capability in range(64):
        try:
            prctl(PR_CAPBSET_DROP, capability)
        except OSError:
            break  # past the kernel's last capability
    empty = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(_CapHeader(_CAPABILITY_VERSION_3, 0)), empty), "capset")
