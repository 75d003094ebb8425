"""Was a failed checkpoint save a disk problem (full, over quota, read-only, a file over the size limit)?

A full disk does not always raise ``OSError(ENOSPC)`` where a save writes: safetensors raises its own
``SafetensorError`` ("No space left on device (os error 28)"), ``torch.distributed.checkpoint`` wraps the
``OSError`` in a ``CheckpointException``, a Ray worker's error arrives as a ``WorkerError``, and
``torch.save`` reports only "file write failed" or "unexpected pos". :func:`disk_problem` looks through the
exception chain, the messages, the files written (one that reached the process's file-size limit,
``RLIMIT_FSIZE``) and, last, the free space left on the file system.

A file-size limit (``ulimit -f``) makes a write past it fail with ``EFBIG`` ("File too large"): Python
ignores the ``SIGXFSZ`` that the kernel would otherwise kill the process with, and so do the worker processes
it starts (Ray's workers are Python processes too).
"""

from __future__ import annotations

import errno
import os
import resource
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
#: what a failed write says when it went past the file-size limit (``EFBIG``)
_FILE_SIZE_TEXTS: tuple[str, ...] = ("file too large", "os error 27", "errno 27")
_TEXT_REASONS: tuple[tuple[str, str], ...] = (
    ("no space left on device", "the disk is full"),
    ("os error 28", "the disk is full"),
    ("errno 28", "the disk is full"),
    ("disk quota exceeded", "the disk quota is exceeded"),
    ("read-only file system", "the file system is read-only"),
)


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, its causes and contexts, a worker error's ``cause`` and a distributed checkpoint's failures
    (``torch.distributed.checkpoint`` wraps whatever a rank raised, a stop signal's ``KeyboardInterrupt``
    included, in a ``CheckpointException``)."""
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


def file_size_limit() -> int | None:
    """The largest file this process may write, in bytes (the soft ``RLIMIT_FSIZE``, set with ``ulimit -f``),
    or None when it is unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def _file_size_reason() -> str:
    """The reason of an ``EFBIG`` write, naming the limit."""
    limit = file_size_limit()
    if limit is None:
        return "a file grew past the largest file the file system allows (File too large)"
    return f"the file-size limit was hit: no file may exceed {limit} bytes (RLIMIT_FSIZE, set with ulimit -f)"


def _at_size_limit(written: Path) -> bool:
    """Whether a file under ``written`` reached this process's file-size limit (a writer that reports no
    errno, such as ``torch.save``, stopped there)."""
    limit = file_size_limit()
    if limit is None or not written.is_dir():
        return False
    for root, _, files in os.walk(written):
        for name in files:
            try:
                if Path(root, name).stat().st_size >= limit:
                    return True
            except OSError:
                continue
    return False


def disk_problem(exc: BaseException, folder: Path, written: Path | None = None) -> str | None:
    """What was wrong with the disk when a save into ``folder`` failed with ``exc`` ("the disk is full", "the
    file system is read-only", "the file-size limit was hit ...", ...), or None when the failure does not
    look like a disk problem. ``written`` is the folder the save wrote into (a file there that reached the
    file-size limit is a sign). Call it before the half-written files are deleted (they and the free space
    are signs)."""
    for error in exception_chain(exc):
        if isinstance(error, OSError) and error.errno == errno.EFBIG:
            return _file_size_reason()
        if isinstance(error, OSError) and error.errno in _ERRNO_REASONS:
            return _ERRNO_REASONS[error.errno]
        text = str(error).lower()
        if any(needle in text for needle in _FILE_SIZE_TEXTS):
            return _file_size_reason()
        for needle, reason in _TEXT_REASONS:
            if needle in text:
                return reason
    if written is not None and _at_size_limit(written):
        return _file_size_reason()
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
