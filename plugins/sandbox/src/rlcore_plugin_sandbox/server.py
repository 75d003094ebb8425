"""The caller's handle on its launcher server (:mod:`.jail.server`): one per process, started on first use.

Launching each program through a fork of a ready launcher costs a ``fork``; a fresh interpreter would cost
its start-up and the ``ctypes`` import on every call. A process forked from one that has a server (a scorer
process) starts its own: the inherited handle is dropped in the child, so the two never share a socket.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

from rlcore.api import mark_infrastructure

#: the server script, run by this interpreter in isolated mode without site-packages
SERVER = Path(__file__).with_name("jail") / "server.py"
#: the server's own environment (each program gets its own from the spec)
SERVER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


class LauncherServer:
    """A running launcher server and the socket to it; requests from several threads take turns."""

    def __init__(self) -> None:
        """Start the server (an :class:`OSError` when it cannot be)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(SERVER), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=SERVER_ENV,
                start_new_session=True,
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        mark_infrastructure(self.process.pid)  # started on first use, maybe inside an inline scorer: rlcore's own
        self.channel = ours
        self.lock = threading.Lock()

    def _ask(self, words: list[str], fds: list[int]) -> str:
        with self.lock:
            socket.send_fds(self.channel, ["\0".join(words).encode("utf-8", "surrogateescape")], fds)
            reply = self.channel.recv(4096).decode()
        if not reply:
            raise OSError(f"the sandbox's launcher server (pid {self.process.pid}) ended")
        return reply

    def launch(self, arguments: list[str], fds: list[int]) -> int:
        """Start a launcher for the spec ``arguments`` with the descriptors stdin, stdout, stderr, setup and
        events; its PID (to :meth:`signal` it)."""
        reply = self._ask(["launch", *arguments], fds)
        if not reply.isdigit():
            raise OSError(reply)
        return int(reply)

    def signal(self, pid: int, number: int) -> None:
        """Send signal ``number`` to the launcher ``pid`` if it still runs (after SIGKILL, once it and what
        it left behind are gone)."""
        self._ask(["signal", str(pid), str(number)], [])


_servers: dict[int, LauncherServer] = {}
_servers_lock = threading.Lock()


def launcher_server() -> LauncherServer:
    """This process's launcher server, started (again) when there is none running."""
    with _servers_lock:
        server = _servers.get(os.getpid())
        if server is None or server.process.poll() is not None:
            server = _servers[os.getpid()] = LauncherServer()
        return server


def _forget_after_fork() -> None:
    """In a forked child: close the inherited sockets (they are the parent's) and start afresh."""
    global _servers_lock
    for server in _servers.values():
        server.channel.close()
    _servers.clear()
    _servers_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
