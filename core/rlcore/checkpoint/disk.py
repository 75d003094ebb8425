"""Was a failed checkpoint save a disk problem (full, over quota, read-only)?

A full disk does not always raise ``OSError(ENOSPC)`` where a save writes: safetensors raises its own
``SafetensorError`` ("No space left on device (os error 28)"), ``torch.distributed.checkpoint`` wraps the
``OSError`` in a ``CheckpointException``, a Ray worker's error arrives as a ``WorkerError``, and
``torch.save`` reports only "file write failed" or "unexpected pos". :func:`disk_problem` looks through the
exception chain, the messages and, last, the free space left on the file system.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

#: a write that failed with less than this free on the file system is taken for a full disk
LOW_SPACE_BYTES = 1 << 20

_ERRNO_REASONS: dict[int, str] = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "the folder is not writable",
    errno.EPERM: "the folder is not writable",
}
_TEXT_REASONS: tuple[tuple[str, str], ...] = (
    ("no space left on device", "the disk is full"),
    ("os error 28", "the disk is full"),
    ("errno 28", "the disk is full"),
    ("disk quota exceeded", "the disk quota is exceeded"),
    ("read-only file system", "the file system is read-only"),
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, its causes and contexts, a worker error's ``cause`` and a distributed checkpoint's failures."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        linked = [current.__cause__, current.__context__, getattr(current, "cause", None)]
        failures = getattr(current, "failures", None)  # torch.distributed.checkpoint's CheckpointException
        if isinstance(failures, dict):
            linked += [f[0] if isinstance(f, tuple) and f else f for f in failures.values()]
        todo += [e for e in linked if isinstance(e, BaseException)]


def free_bytes(folder: Path) -> int | None:
    """Bytes an unprivileged writer may still use on the file system holding ``folder`` (0 when it has no
    free inodes left), or None when it cannot be told."""
    path = Path(folder)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    if stats.f_files and stats.f_favail == 0:
        return 0
    return stats.f_bavail * stats.f_frsize


def disk_problem(exc: BaseException, folder: Path) -> str | None:
    """What was wrong with the disk when a save into ``folder`` failed with ``exc`` ("the disk is full", "the
    file system is read-only", ...), or None when the failure does not look like a disk problem. Call it
    before the half-written files are deleted (the free space is one of the signs)."""
    for error in _chain(exc):
        if isinstance(error, OSError) and error.errno in _ERRNO_REASONS:
            return _ERRNO_REASONS[error.errno]
        text = str(error).lower()
        for needle, reason in _TEXT_REASONS:
            if needle in text:
                return reason
    free = free_bytes(folder)
    if free is not None and free < LOW_SPACE_BYTES:
        return f"the disk is full ({free} bytes left)"
    return None


def last_written(folder: Path) -> str | None:
    """The file under ``folder`` written last (its path relative to ``folder``), or None."""
    newest: tuple[float, str] | None = None
    for root, _, files in os.walk(folder):
        for name in files:
            path = Path(root, name)
            try:
                mtime = path.stat().st_mtime
            except OSError:
                continue
            if newest is None or mtime >= newest[0]:
                newest = (mtime, path.relative_to(folder).as_posix())
    return newest[1] if newest else None
