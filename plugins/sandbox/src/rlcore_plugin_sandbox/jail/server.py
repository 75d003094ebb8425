"""The sandbox's launcher server: ``python -I -S server.py FD`` forks one launcher per program.

A fresh interpreter per program would cost more than the confinement itself (start-up and the ``ctypes``
import). So each process that runs sandboxed programs starts this server once (:mod:`rlcore_plugin_sandbox.launch`)
and asks it over the ``SOCK_SEQPACKET`` socket ``FD``:

``launch`` and the spec's ``KEY=VALUE`` words, with the descriptors stdin, stdout, stderr, setup and events
    It forks a launcher (:func:`launcher.launch`) and replies with its PID.
``signal PID NUMBER``
    It sends the signal to that launcher if it is still its child (so a recycled PID is never signalled),
    and replies ``sent`` or ``gone``; after SIGKILL it also kills what the launcher left behind.

Words are separated by NUL bytes. The server is a child subreaper: what a killed launcher leaves behind is
re-parented to it and killed. When the socket closes (its caller ended, or was killed), it kills every
program still running, removes their folders and cgroups, and ends.
"""

import os
import select
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kernel  # noqa: E402 - this folder, added above (the interpreter runs isolated)
import launcher  # noqa: E402
from cgroup_folder import remove_when_empty  # noqa: E402

#: descriptors that come with a ``launch`` request: stdin, stdout, stderr, setup, events
LAUNCH_FDS = 5
#: seconds a cgroup of a killed program may take to empty (its processes exit after SIGKILL, not at it)
CGROUP_EMPTY_SECONDS = 5.0


class Server:
    """The launchers this server started and not yet reaped."""

    def __init__(self, channel: socket.socket) -> None:
        self.channel = channel
        self.launchers: set[int] = set()
        #: per running launcher, what its caller removes after the call: the program's folder, its cgroups
        self.leftovers: dict[int, list[str]] = {}

    def serve(self) -> None:
        """Answer requests until the socket closes."""
        requests = select.poll()  # not select.select: the channel keeps its number from the caller, maybe >= 1024
        requests.register(self.channel, select.POLLIN)
        while True:
            self.reap()
            if not requests.poll(1000):
                continue
            try:
                message, fds, _, _ = socket.recv_fds(self.channel, 1 << 20, LAUNCH_FDS)
            except OSError:
                message, fds = b"", []
            if not message:
                self.shutdown()
                return
            words = message.decode("utf-8", "surrogateescape").split("\0")
            try:
                reply = self.launch(words[1:], fds) if words[0] == "launch" else self.signal(*map(int, words[1:]))
            finally:
                for fd in fds:
                    os.close(fd)
            self.channel.send(reply.encode())

    def launch(self, arguments: list[str], fds: list[int]) -> str:
        """Fork a launcher for the spec ``arguments``; its PID."""
        if len(fds) != LAUNCH_FDS:
            return "error: a launch request needs 5 descriptors"
        stdin, stdout, stderr, setup, events = fds
        pid = os.fork()
        if pid == 0:
            self.channel.close()
            os.set_inheritable(events, True)  # the program's interpreter reports on it
            launcher.launch([*arguments, f"setup_fd={setup}", f"events_fd={events}"], (stdin, stdout, stderr))
        self.launchers.add(pid)
        spec = launcher.parse_spec([*arguments, f"setup_fd={setup}", f"events_fd={events}"])
        self.leftovers[pid] = [os.path.dirname(spec["folder"])] + [os.path.dirname(p) for p in spec["cgroup_procs"]]
        return str(pid)

    def signal(self, pid: int, number: int) -> str:
        """Signal the launcher ``pid`` if it is still this server's child; after SIGKILL, wait for it and kill
        the processes it left behind."""
        if pid not in self.launchers:
            return "gone"
        os.kill(pid, number)
        if number == launcher.signal.SIGKILL:
            os.waitpid(pid, 0)
            self.launchers.discard(pid)
            self.leftovers.pop(pid, None)
            self.kill_strays()
        return "sent"

    def shutdown(self) -> None:
        """The caller is gone (it ended or was killed): nobody will stop its programs at their wall time, nor
        remove their folders and cgroups, so do both now."""
        leftovers = [self.leftovers[pid] for pid in self.launchers if pid in self.leftovers]
        for pid in list(self.launchers):
            self.signal(pid, launcher.signal.SIGKILL)
        self.reap()
        if leftovers:
            import shutil

            for folder, *cgroups in leftovers:
                shutil.rmtree(folder, ignore_errors=True)
                for cgroup in cgroups:
                    remove_when_empty(cgroup, time.monotonic() + CGROUP_EMPTY_SECONDS)

    def reap(self) -> None:
        """Reap the launchers that ended, and any process left behind and re-parented here."""
        try:
            while True:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    return
                self.launchers.discard(pid)
                self.leftovers.pop(pid, None)
                if os.WIFSIGNALED(status):
                    self.kill_strays()
        except ChildProcessError:
            return

    def kill_strays(self) -> None:
        """SIGKILL every child of this server that is not a running launcher (orphans of a killed one)."""
        for pid in launcher.process_tree().get(str(os.getpid()), []):
            if int(pid) not in self.launchers:
                try:
                    os.kill(int(pid), launcher.signal.SIGKILL)
                except OSError:
                    pass


def main() -> None:
    """Serve on the socket descriptor ``sys.argv[1]``."""
    kernel.prctl(kernel.PR_SET_CHILD_SUBREAPER, 1)
    Server(socket.socket(fileno=int(sys.argv[1]))).serve()


if __name__ == "__main__":
    main()
