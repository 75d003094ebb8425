"""``model.use_shm``: load a model from a copy in shared memory (``/dev/shm``), made once per node.

verl's ``use_shm`` copies the model directory into ``/dev/shm`` and loads from there (reading RAM instead of
a slow or network disk). Here every worker process of a node asks :func:`stage` for the copy: the first one
copies (into a temporary folder, renamed when complete), the others wait on a file lock and use its copy.
The copy is named after the source's path and its files' sizes and modification times, so a changed model
gets a fresh copy. Each process registers itself as a user of the copy; :func:`release` (called when the
worker shuts down, and at exit) removes the copy once no live process uses it. Torch-free.
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlcore.child_processes import process_exists
from rlcore.errors import RLCoreError

__all__ = ["SHM_ROOT", "release", "stage"]

#: where the copies go: the node's shared memory
SHM_ROOT = Path("/dev/shm")
#: the marker a complete copy holds
COMPLETE = ".rlcore-shm-complete"
#: the copies this process uses: the path :func:`stage` returned -> the copy's folder
_STAGED: dict[str, Path] = {}


def _fingerprint(source: Path) -> str:
    """A digest of ``source``'s absolute path and of every file's relative path, size and mtime."""
    digest = hashlib.sha256(str(source.resolve()).encode())
    files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
    for path in files:
        stat = path.stat()
        digest.update(
            f"{path.relative_to(source) if path != source else ''}:{stat.st_size}:{stat.st_mtime_ns}".encode()
        )
    return digest.hexdigest()[:16]


@contextmanager
def _locked(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_file`` (created) for the block: one process of the node at a time."""
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def stage(source: str, key: str, root: Path | None = None) -> str:
    """The path of ``source``'s copy under ``root`` (default :data:`SHM_ROOT`), made by the first caller of the
    node while the others wait; this process is registered as a user of it. ``key`` (the ``use_shm`` key)
    is named by the errors: ``source`` must be a local directory or file, and ``root`` must exist."""
    base = SHM_ROOT if root is None else root
    origin = Path(source).expanduser()
    if not origin.exists():
        raise RLCoreError(
            f"{key}=true needs a local model directory to copy into shared memory; {source!r} is not one "
            "(download the model first)"
        )
    if not base.is_dir():
        raise RLCoreError(f"{key}=true: {base} does not exist on this node (no shared memory to copy the model into)")
    folder = base / "rlcore-shm"
    folder.mkdir(exist_ok=True)
    dest = folder / f"{origin.name}-{_fingerprint(origin)}"
    with _locked(folder / f"{dest.name}.lock"):
        if not (dest / COMPLETE).exists():
            partial = folder / f"{dest.name}.partial-{os.getpid()}"
            try:
                if origin.is_dir():
                    shutil.copytree(origin, partial)
                else:
                    partial.mkdir()
                    shutil.copy2(origin, partial / origin.name)
                (partial / COMPLETE).touch()
                shutil.rmtree(dest, ignore_errors=True)  # an incomplete copy of a process that died
                partial.rename(dest)
            except OSError as exc:
                shutil.rmtree(partial, ignore_errors=True)
                raise RLCoreError(f"{key}=true: copying {source} into {folder} failed: {exc}") from exc
        users = folder / f"{dest.name}.users"
        users.mkdir(exist_ok=True)
        (users / str(os.getpid())).touch()
    staged = str(dest / origin.name) if origin.is_file() else str(dest)
    if staged not in _STAGED:
        atexit.register(release, staged)
    _STAGED[staged] = dest
    return staged


def release(staged: str) -> None:
    """This process no longer uses the copy ``staged`` (a path :func:`stage` returned); the copy is removed
    when no live process of the node is registered as its user. Idempotent."""
    dest = _STAGED.pop(staged, None)
    if dest is None:
        return
    folder = dest.parent
    with _locked(folder / f"{dest.name}.lock"):
        users = folder / f"{dest.name}.users"
        (users / str(os.getpid())).unlink(missing_ok=True)
        live = [user for user in users.glob("*") if user.name.isdigit() and process_exists(int(user.name))]
        if not live:
            shutil.rmtree(dest, ignore_errors=True)
            shutil.rmtree(users, ignore_errors=True)
