"""The folder's bound where no tmpfs holds it (the ``landlock`` and ``none`` modes, whose folder is on the host's
disk): while the program runs, its launcher measures the folder every :data:`CHECK_S` seconds and stops the
program once it holds more than ``folder_mb``.

What counts (:func:`folder_bytes`): every file, folder and link under the folder, each at least one 4 KB block
(a file with several names once), and the files the program's processes hold open that no longer have a name
(deleted, or made with ``O_TMPFILE``) on the folder's filesystem (looked for every :data:`OPEN_FILES_EVERY`
checks: it reads ``/proc`` of each process). A folder the launcher cannot read counts as past the bound. It is
a watchdog, not a hard limit: between two checks a program can write more (what it writes in that time, each
file at most ``file_mb``).
"""

import os
import select
import stat
import time
from _collections_abc import Callable  # (already loaded: collections.abc would cost start-up time)

#: seconds between two measures of the folder
CHECK_S = 0.01
#: the open files of the program's processes are measured every this many checks
OPEN_FILES_EVERY = 5
#: what a file or folder counts at least (the blocks its inode and entry take)
BLOCK = 4096
#: what an unreadable folder counts: more than any bound
UNREADABLE = 1 << 62


def folder_bytes(folder: str, seen: set[tuple[int, int]] | None = None) -> int:
    """What ``folder`` holds on disk in bytes (see the module's docstring); ``seen`` collects the
    ``(device, inode)`` of the files counted."""
    seen = set() if seen is None else seen
    total = 0
    pending = [folder]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            return UNREADABLE
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += max(info.st_blocks * 512, BLOCK)
            if stat.S_ISDIR(info.st_mode):
                pending.append(entry.path)
    return total


def unnamed_bytes(pids: list[str], device: int, seen: set[tuple[int, int]]) -> int:
    """What the regular files that the processes ``pids`` hold open on ``device``, and that have no name left,
    take on disk (each file once, ``seen`` included)."""
    total = 0
    for pid in pids:
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # it ended meanwhile
        for fd in descriptors:
            try:
                info = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            key = (info.st_dev, info.st_ino)
            if stat.S_ISREG(info.st_mode) and info.st_dev == device and info.st_nlink == 0 and key not in seen:
                seen.add(key)
                total += info.st_blocks * 512
    return total


def wait(child: int, folder: str, limit: int, program_pids: Callable[[], list[str]]) -> tuple[int | None, int | None]:
    """Reap children until ``child`` ends, measuring ``folder`` meanwhile; ``(exit code, None)`` when it ended
    (negative: the signal that killed it), or ``(None, bytes held)`` as soon as the folder holds more than
    ``limit`` bytes (the caller then stops the program). ``program_pids()`` lists the program's processes."""
    device = os.stat(folder).st_dev
    try:
        ended = os.pidfd_open(child)
    except (AttributeError, OSError):  # before Linux 5.3: sleep between checks
        ended = None
    ending = select.poll()
    if ended is not None:
        ending.register(ended, select.POLLIN)
    try:
        checks = 0
        while True:
            code = _reap(child)
            seen: set[tuple[int, int]] = set()
            held = folder_bytes(folder, seen)
            if checks % OPEN_FILES_EVERY == 0 or code is not None:
                held += unnamed_bytes(program_pids(), device, seen)
            if held > limit:
                return code, held
            if code is not None:
                return code, None
            checks += 1
            if ended is None:
                time.sleep(CHECK_S)
            else:
                ending.poll(CHECK_S * 1000)
    finally:
        if ended is not None:
            os.close(ended)


def _reap(child: int) -> int | None:
    """Reap the children that ended; ``child``'s exit code if it is one of them, else ``None``."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return None
        if pid == 0:
            return None
        if pid == child:
            return os.waitstatus_to_exitcode(status)
