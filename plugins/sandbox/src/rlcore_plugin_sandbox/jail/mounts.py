"""The program's filesystem in its mount namespace: a read-only view of what the interpreter needs, a
private folder, and nothing else.

:func:`enter_root` builds a new root on a small tmpfs and switches to it (``pivot_root``), leaving the host's
root unreachable. In it:

- the ``visible`` paths (the interpreter's prefixes, ``/usr``, ``/lib*``, the dynamic loader's files),
  bind-mounted read-only at their own paths, with a symbolic link recreated as a link and its target made
  visible too;
- ``/dev`` with only ``null``, ``zero``, ``full``, ``random`` and ``urandom``;
- ``/proc`` of the program's own PID namespace (where the kernel lets us mount it);
- the program's folder, at the same path as on the host, with a copy of ``main.py``, and ``/tmp``: one
  private tmpfs of ``folder_mb`` MB (and ``folder_mb`` × 256 files and folders) owned by the program's user
  (inside the new ``/dev`` when the folder is under ``/dev``: ``TMPDIR=/dev/shm``);
- everything else, including the root itself, read-only.
"""

import os

import kernel

DEVICES = ("null", "zero", "full", "random", "urandom")
#: files and folders the program's tmpfs may hold per MB of ``folder_mb`` (one per 4 KB): each costs kernel
#: memory that its size does not count
INODES_PER_MB = 256
#: the mount flags a read-only bind keeps from its source (a user namespace may not clear them), as
#: (``statvfs`` flag, mount flag)
_KEPT_FLAGS = (
    (os.ST_NOSUID, kernel.MS_NOSUID),
    (os.ST_NODEV, kernel.MS_NODEV),
    (os.ST_NOEXEC, kernel.MS_NOEXEC),
    (os.ST_NOATIME, kernel.MS_NOATIME),
    (os.ST_NODIRATIME, kernel.MS_NODIRATIME),
    (os.ST_RELATIME, kernel.MS_RELATIME),
)
_SAFE = kernel.MS_NOSUID | kernel.MS_NODEV


def enter_root(stage: str, folder: str, folder_mb: int, owner: tuple[int, int], visible: list[str]) -> list[str]:
    """Build the program's root on the empty directory ``stage`` and make it this process's root, with the
    working directory ``folder``. Returns notes on what could not be provided (``/proc``)."""
    kernel.mount(None, "/", None, kernel.MS_REC | kernel.MS_PRIVATE)
    kernel.mount("tmpfs", stage, "tmpfs", _SAFE, "size=1m,mode=0755")
    exposed: set[str] = set()
    in_dev = folder.startswith("/dev/")  # TMPDIR=/dev/shm: the folder goes inside the new /dev
    if in_dev:
        _make_devices(stage)
    for path in visible:  # a folder inside a visible path (TMPDIR in the virtual environment) goes on top of it
        if folder.startswith(path.rstrip("/") + "/"):
            _expose(stage, path, exposed)
    # the folder before the rest: visible paths under /tmp (a venv there) go inside it
    _make_folder(stage, folder, folder_mb, owner, visible)
    for path in visible:
        _expose(stage, path, exposed)
    if not in_dev:
        _make_devices(stage)
    notes = _mount_proc(stage)
    os.chdir(stage)
    kernel.pivot_root(".", ".")
    kernel.umount(".", kernel.MNT_DETACH)
    for path in ("/dev", "/"):
        kernel.mount(None, path, None, kernel.MS_REMOUNT | kernel.MS_BIND | kernel.MS_RDONLY | _SAFE)
    os.chdir(folder)
    return notes


def _covered(path: str, exposed: set[str]) -> bool:
    """Whether ``path`` or a folder above it is already visible."""
    parts = path.rstrip("/").split("/")
    return any("/".join(parts[:i]) in exposed for i in range(2, len(parts) + 1))


def _expose(stage: str, path: str, exposed: set[str]) -> None:
    """Make the host's ``path`` visible read-only at ``stage + path`` (a link as a link, plus its target)."""
    path = os.path.normpath(path)
    if _covered(path, exposed) or not os.path.lexists(path):
        return
    target = stage + path
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.islink(path):
        os.symlink(os.readlink(path), target)
        exposed.add(path)
        _expose(stage, os.path.realpath(path), exposed)
        return
    if os.path.isdir(path):
        os.makedirs(target, exist_ok=True)
    else:
        open(target, "wb").close()
    kernel.mount(path, target, None, kernel.MS_BIND)
    kept = 0
    flags = os.statvfs(path).f_flag
    for stat_flag, mount_flag in _KEPT_FLAGS:
        kept |= mount_flag if flags & stat_flag else 0
    kernel.mount(None, target, None, kernel.MS_REMOUNT | kernel.MS_BIND | kernel.MS_RDONLY | _SAFE | kept)
    exposed.add(path)


def _make_devices(stage: str) -> None:
    """``/dev`` on its own tmpfs with the harmless devices bound from the host and the ``fd`` links."""
    dev = stage + "/dev"
    os.mkdir(dev)
    kernel.mount("tmpfs", dev, "tmpfs", _SAFE, "size=64k,mode=0755")
    for name in DEVICES:
        open(f"{dev}/{name}", "wb").close()
        kernel.mount(f"/dev/{name}", f"{dev}/{name}", None, kernel.MS_BIND)
    for name, link in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1")):
        os.symlink(link, f"{dev}/{name}")
    os.symlink("/proc/self/fd/2", f"{dev}/stderr")


def _make_folder(stage: str, folder: str, folder_mb: int, owner: tuple[int, int], visible: list[str]) -> None:
    """The program's folder at the host folder's path, with a copy of its ``main.py``, on a private tmpfs of
    ``folder_mb`` MB: mounted on ``/tmp`` when the folder lies under it (so ``/tmp`` is writable too), else on
    the temporary folder it was made in (``TMPDIR``: what else is there stays hidden, even inside a visible
    path) with ``/tmp`` a link to the folder (the folder bound there when a visible path lies under ``/tmp``: a
    virtual environment there is shown inside it); on the folder itself where that is ``/`` or a visible
    path."""
    with open(os.path.join(folder, "main.py"), "rb") as handle:
        program = handle.read()
    uid, gid = owner
    temporary = os.path.dirname(os.path.dirname(folder))
    if folder.startswith("/tmp/"):
        top = "/tmp"
    elif temporary != "/" and temporary not in visible:
        top = temporary
    else:
        top = folder
    os.makedirs(stage + top, exist_ok=True)
    options = f"size={folder_mb}m,nr_inodes={folder_mb * INODES_PER_MB},mode=01777,uid={uid},gid={gid}"
    kernel.mount("tmpfs", stage + top, "tmpfs", _SAFE, options)
    os.makedirs(stage + folder, mode=0o700, exist_ok=True)
    os.chown(stage + folder, uid, gid)
    copy = os.path.join(stage + folder, "main.py")
    with open(copy, "wb") as handle:
        handle.write(program)
    os.chown(copy, uid, gid)
    if top == "/tmp":
        return
    if any(path == "/tmp" or path.startswith("/tmp/") for path in visible):  # a venv under /tmp is shown there
        os.makedirs(stage + "/tmp")
        kernel.mount(stage + folder, stage + "/tmp", None, kernel.MS_BIND)
    else:
        os.symlink(folder, stage + "/tmp")


def _mount_proc(stage: str) -> list[str]:
    """A ``/proc`` of this PID namespace; a note instead where the kernel refuses (a container that masks
    parts of the host's ``/proc``)."""
    os.mkdir(stage + "/proc")
    try:
        kernel.mount("proc", stage + "/proc", "proc", _SAFE | kernel.MS_NOEXEC)
    except OSError as error:
        return [f"no /proc ({error})"]
    return []
