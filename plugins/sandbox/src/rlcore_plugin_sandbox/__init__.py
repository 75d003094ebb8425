"""rlcore plugin: run untrusted Python (model-written code) confined by the kernel: the sandbox of the code
reward (data sources ``codecontests``, ``apps``, ``codeforces``, ``taco``) and the ``code_interpreter`` tool.

This module is the plugin's public API (:func:`run_python` for custom tools and rewards).

One sandbox serves the code-interpreter tool of multi-turn rollouts and the code-execution reward. For each
:func:`run_python` call, this process's launcher server (:mod:`.server`, started once) forks a launcher
(:mod:`.jail.launcher`) that confines the program before its interpreter starts, in the strongest way this
host allows (:func:`host_isolation`, ``rlcore sandbox check``):

- **namespaces** (Linux with user namespaces, or root): new mount, PID, network, IPC and UTS namespaces. The
  program sees a read-only view of the interpreter and the system libraries and a private tmpfs folder
  (:mod:`.view`); the host's files, ``/root``, home folders and the run's folders are not there. Its
  namespace's init dies with it, taking every process it started. It has no network but a loopback that is
  down, and no privileges (its own user id, or the caller's inside a user namespace);
- **landlock** (no user namespaces, Linux 5.13+): the same reads and writes through Landlock, no TCP, and a
  child subreaper that kills every descendant;
- **none**: rlimits, the subreaper and the audit hook only. Code rewards and the code tool refuse this and
  ``landlock`` unless the user accepts them (:mod:`.policy`).

In every mode: CPU time (``RLIMIT_CPU``), wall time (every process killed), memory (``RLIMIT_AS``, and a
memory cgroup for the whole program where one can be created: only the cgroup counts the kernel's pipe and
socket buffers, so without one memory is not enforced and the level is not ``full``), processes
(``RLIMIT_NPROC``, a pids cgroup), file size, folder size (a tmpfs with namespaces, a watchdog elsewhere),
output size (stdout and stderr cut to ``output_bytes``), an empty environment. An audit hook
(:mod:`.jail.program`) names what the program tried that is refused (``status="blocked"``); it is a
friendly layer, the kernel is the boundary. A mode or cgroup that fails where a stronger one was wanted is
never silent: a warning, the plan's sandbox line and ``rlcore sandbox check`` name the cause.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlcore_plugin_sandbox.host import HostIsolation, host_isolation
    from rlcore_plugin_sandbox.launch import SandboxError
    from rlcore_plugin_sandbox.limits import SandboxLimits, SandboxResult, Status
    from rlcore_plugin_sandbox.policy import SandboxUnavailableError
    from rlcore_plugin_sandbox.runner import run_python, run_python_async

__version__ = "0.1.0"

#: the module of each public name, imported on first use: the plugin's hooks module (imported by every
#: ``rlcore`` command) is in this package, and the sandbox itself is needed only by runs that execute code
_HOMES = {
    "HostIsolation": "host",
    "host_isolation": "host",
    "SandboxError": "launch",
    "SandboxLimits": "limits",
    "SandboxResult": "limits",
    "Status": "limits",
    "SandboxUnavailableError": "policy",
    "run_python": "runner",
    "run_python_async": "runner",
}


def __getattr__(name: str) -> Any:
    """The public name ``name``, from the module that defines it (imported on first use)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


__all__ = [
    "HostIsolation",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailableError",
    "Status",
    "__version__",
    "host_isolation",
    "run_python",
    "run_python_async",
]
