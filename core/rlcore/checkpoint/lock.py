"""One run at a time in a checkpoint folder: an ``flock``-ed lock file held for the run's whole life.

Two runs with the same ``trainer.default_local_dir`` (two runs with the default experiment name get it)
would overwrite each other's ``global_step_N`` folders. The first run takes an exclusive ``flock`` on
``<default_local_dir>/rlcore-run.lock`` and writes its identity there (PID, host, start time, run
directory); a second run fails at once with an error naming the first. The kernel releases the lock when
the process ends, however it ends (``kill -9`` included), so a lock file left behind never blocks a later
run. A file system that cannot lock (some network file systems) is warned about and not locked.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
from pathlib import Path
from typing import Any

from rlcore.checkpoint.manager import CheckpointError, saves_checkpoints
from rlcore.checkpoint.ownership import RunIdentity, describe_run
from rlcore.config.sections.trainer import TrainerConfig

log = logging.getLogger(__name__)

#: the lock file in ``trainer.default_local_dir``
LOCK_FILE = "rlcore-run.lock"

_HELD: set[int] = set()  # the lock file descriptors this process holds


def _close_held_in_child() -> None:
    """In a forked child: close the inherited lock descriptors, so that a child that outlives the run (a
    scorer's leftover process) never keeps the folder locked."""
    for fd in _HELD:
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_close_held_in_child)


def _holder(fd: int) -> dict[str, Any] | None:
    """What the lock file says about the run holding it."""
    try:
        data = os.pread(fd, 65536, 0)
        record = json.loads(data) if data else None
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


class FolderLock:
    """An exclusive lock on ``root/rlcore-run.lock`` held by this process until :meth:`release` (or its end).

    Raises :class:`CheckpointError` naming the run that holds it.
    """

    def __init__(self, root: Path, identity: RunIdentity) -> None:
        self.path = root / LOCK_FILE
        self.fd: int | None = None
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _holder(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                log.warning(
                    "cannot lock %s (%s): the file system does not support locks, so another run using "
                    "trainer.default_local_dir=%s at the same time would not be detected",
                    self.path,
                    exc.strerror or exc,
                    root,
                )
                return
            raise CheckpointError(
                f"trainer.default_local_dir={root} is in use by another run: {describe_run(holder)}. Two runs "
                "saving into one folder overwrite each other's checkpoints: wait for that run to end, or give this "
                "run its own folder (another trainer.experiment_name, or trainer.default_local_dir)"
            ) from None
        self.fd = fd
        _HELD.add(fd)
        self.record(identity)

    def record(self, identity: RunIdentity) -> None:
        """Write ``identity`` (PID, host, start time, run directory) into the held lock file, for the message
        a second run gets."""
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, json.dumps(identity.record(), indent=2).encode(), 0)

    def release(self) -> None:
        """Release the lock (idempotent); the file stays, naming the last run that held it."""
        if self.fd is not None:
            _HELD.discard(self.fd)
            os.close(self.fd)
            self.fd = None


def lock_checkpoint_folder(
    trainer: TrainerConfig, identity: RunIdentity, *, saves: bool | None = None
) -> FolderLock | None:
    """Lock ``trainer.default_local_dir`` for this run when the run saves checkpoints there (``saves``; by
    default :func:`~rlcore.checkpoint.manager.saves_checkpoints`), or resumes from it (``trainer.resume_mode=auto``
    with the folder present: such a resume deletes half-written saves); None when the run does neither (or
    the file system cannot lock)."""
    root_name = trainer.default_local_dir
    if not root_name:
        return None
    root = Path(root_name)
    resumes_here = trainer.resume_mode == "auto" and root.is_dir()
    if not ((saves_checkpoints(trainer) if saves is None else saves) or resumes_here):
        return None
    root.mkdir(parents=True, exist_ok=True)
    lock = FolderLock(root, identity)
    return lock if lock.fd is not None else None
