"""Deleting a program's cgroup folder once its processes are gone: ``rmdir`` fails with EBUSY until the cgroup is
empty, and killed processes leave it when they exit, not when the signal is sent. Used by the caller's
:class:`~rlcore_plugin_sandbox.cgroups.Cgroups` and by the launcher server (which imports it by its own name, like
the other modules of this folder); standard library only.
"""

import os
import time


def remove_when_empty(path: str, deadline: float) -> None:
    """Delete the cgroup folder ``path``, retrying while it still holds processes, until ``deadline``
    (``time.monotonic()``); past it, leave the folder."""
    while os.path.isdir(path):
        try:
            os.rmdir(path)
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)
