"""What a sandboxed program may read: the interpreter and the system libraries, nothing else.

With kernel isolation (a mount namespace or Landlock) the program sees only :func:`visible_paths`,
read-only, plus its own folder and the devices ``/dev/null``, ``zero``, ``full``, ``random`` and
``urandom``. Not visible, among everything else: ``/etc`` (but the dynamic loader's files), ``/root``, the
user's home, the run's folders, ``/sys``, the host's ``/proc`` and ``/tmp``. The Python prefixes are
visible even where they lie in a home folder (a virtual environment, pyenv), but nothing beside them.
"""

from __future__ import annotations

import functools
import os
import sys

#: system folders and files every Linux program may need
SYSTEM_PATHS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
)


@functools.cache
def visible_paths() -> tuple[str, ...]:
    """The existing paths the program may read: :data:`SYSTEM_PATHS` and this interpreter's prefixes and
    executable folder, without any that lies inside another (found once per process)."""
    executable = os.path.realpath(sys.executable)
    candidates = [*SYSTEM_PATHS, sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    candidates += [os.path.realpath(sys.base_prefix), os.path.dirname(executable)]
    paths: list[str] = []
    for path in sorted({os.path.abspath(p) for p in candidates if os.path.lexists(p)}):
        if path != "/" and not any(path.startswith(kept + "/") for kept in paths):
            paths.append(path)
    return tuple(paths)
