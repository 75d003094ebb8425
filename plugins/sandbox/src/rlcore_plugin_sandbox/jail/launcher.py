"""One program's launcher: confine the program and supervise it, in a process forked for it by :mod:`server`.

Entering namespaces, mounting and dropping privileges must happen in a single-threaded process (the caller
may run threads), hence a process of its own for each program. Its spec (see :func:`parse_spec`) is written
by :mod:`rlcore_plugin_sandbox.launch`. What it does depends on the spec's ``mode``:

``namespaces``
    It enters new PID, network, IPC and UTS namespaces — as root directly, otherwise inside a new user
    namespace that maps only the caller's own user — then forks the namespace's init (PID 1). The init
    enters a mount namespace of its own, builds the program's root (:mod:`mounts`) and forks the program.
    When the program ends, or the launcher dies, the init ends, and the kernel kills every process left in
    the namespace, ``setsid`` or not.
``landlock``
    It becomes a child subreaper and forks the program under a Landlock ruleset (:mod:`landlock`): reads of
    the visible paths only, writes in the folder only, no TCP. When the program ends it kills every
    descendant left (orphans are re-parented to it, so none can leave). Meanwhile it measures the folder
    (:mod:`folder_watch`: no tmpfs bounds it) and kills the program once it holds more than ``folder_mb``,
    reporting ``folder BYTES``.
``none``
    The same supervision without Landlock: only the rlimits, the folder's watchdog and the audit hook
    confine the program.

In every mode a root caller's program runs under its own unprivileged user (``UID_BASE`` + the launcher's
PID, so that ``RLIMIT_NPROC`` counts this program's processes only), with no capabilities and
``no_new_privs``; it joins the per-call cgroups the caller created. SIGTERM kills the whole tree. The
launcher reports on the descriptor ``setup_fd``, one line each: ``info KEY VALUE`` about the host,
``note TEXT``, ``error TEXT`` when confining failed (the program then does not run), ``folder BYTES`` (or
``folder unreadable``) when its folder held more than ``folder_mb``, and ``exit CODE`` (negative: killed by
that signal) when the program ended.
"""

import _signal as signal  # not signal: that module imports enum, which doubles the start-up time
import os

import folder_watch
import kernel
import landlock
import mounts

#: the first user id of the programs of a root caller (systemd leaves 0x78000000 and above unassigned)
UID_BASE = 0x78000000
#: separates the items of a list value in the spec (and ``NAME=VALUE`` items of the environment)
SEPARATOR = "\x1f"
#: the spec's keys with list values, and those with integer values
LIST_KEYS = ("visible", "cgroup_procs", "site", "env")
INT_KEYS = ("setup_fd", "events_fd", "folder_mb", "max_processes")
#: the program's preamble (:mod:`program`), passed to its interpreter with ``-c``; read once, by the server,
#: while the host's files are in sight
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "program.py"), encoding="utf-8") as _file:
    PROGRAM = _file.read()


def parse_spec(arguments: list[str]) -> dict:
    """The spec from ``KEY=VALUE`` arguments: lists are joined by :data:`SEPARATOR`, ``env`` holds
    ``NAME=VALUE`` items, ``audit`` is ``1`` or ``0``."""
    spec: dict = {}
    for argument in arguments:
        key, _, value = argument.partition("=")
        if key in LIST_KEYS:
            spec[key] = value.split(SEPARATOR) if value else []
        elif key in INT_KEYS:
            spec[key] = int(value)
        else:
            spec[key] = value
    spec["env"] = dict(item.partition("=")[::2] for item in spec["env"])
    spec["audit"] = spec["audit"] == "1"
    return spec


class Stopped(Exception):
    """The caller asked for the program to be stopped (SIGTERM)."""


def _stop(signum: int, frame: object) -> None:
    raise Stopped


class Launcher:
    """One program's confinement and supervision, as its spec describes it."""

    def __init__(self, spec: dict) -> None:
        """Choose the program's user and process limit (nothing that can fail: failures are reported by :meth:`run`)."""
        self.spec = spec
        self.setup_fd = spec["setup_fd"]
        os.set_inheritable(self.setup_fd, False)
        self.cgroups: list[int] = []
        self.owner = (os.geteuid(), os.getegid())
        #: a root caller's program keeps uid 0 without capabilities where another user could not reach the
        #: interpreter (a Python under /root) and no mount namespace makes it visible
        self.keep_root = self.owner[0] == 0 and spec["mode"] != "namespaces" and not _others_can_reach(spec)
        if self.owner[0] == 0 and not self.keep_root:
            self.owner = (UID_BASE + os.getpid(), UID_BASE + os.getpid())
        #: RLIMIT_NPROC counts the processes of the program's real user id: the program's own where it has a
        #: user id of its own or a user namespace (where the launcher and the init count too); elsewhere it
        #: would count all of the user's processes, so it is left as it is (-1)
        self.process_limit = -1
        if self.owner[0] != os.geteuid():
            self.process_limit = spec["max_processes"]
        elif spec["mode"] == "namespaces":
            self.process_limit = spec["max_processes"] + 2

    def report(self, *words: object) -> None:
        """One line to the caller."""
        try:
            os.write(self.setup_fd, (" ".join(str(w) for w in words) + "\n").encode("utf-8", "replace"))
        except OSError:
            pass

    def run(self) -> None:
        """Confine and supervise the program; report its exit."""
        self.cgroups = [os.open(path, os.O_WRONLY | os.O_CLOEXEC) for path in self.spec["cgroup_procs"]]
        self.report("info", "landlock-abi", landlock.abi())
        user = "root-without-capabilities" if self.keep_root else "own" if os.geteuid() == 0 else "caller"
        self.report("info", "user", user)
        self.report("info", "uid", self.owner[0])
        self.report("info", "process-limit", self.process_limit)
        if self.spec["mode"] == "namespaces":
            self._enter_namespaces()
            lifeline, keep = os.pipe()
            child = os.fork()
            if child == 0:
                os.close(keep)
                self._init(lifeline)
            os.close(lifeline)
        else:
            if self.spec["mode"] == "landlock" and landlock.abi() < 1:
                raise OSError(95, "Landlock is not available in this kernel")
            kernel.prctl(kernel.PR_SET_CHILD_SUBREAPER, 1)
            if os.geteuid() == 0 and not self.keep_root:
                for path in (self.spec["folder"], os.path.join(self.spec["folder"], "main.py")):
                    os.chown(path, *self.owner)
            child = os.fork()
            if child == 0:
                self._start_program()
        for fd in self.cgroups:
            os.close(fd)
        if self.spec["mode"] == "namespaces":  # the namespace's init reports the program's exit itself
            _wait_for(child)
            _kill_descendants()
            return
        code, held = folder_watch.wait(child, self.spec["folder"], self.spec["folder_mb"] << 20, self._program_pids)
        if held is not None:
            self.report("folder", held if held < folder_watch.UNREADABLE else "unreadable")
        _kill_descendants()
        self.report("exit", -signal.SIGKILL if code is None else code)

    def _program_pids(self) -> list[str]:
        """The program's processes: its cgroup's, else this launcher's descendants."""
        for path in self.spec["cgroup_procs"]:
            try:
                with open(path) as handle:
                    return handle.read().split()
            except OSError:
                break
        parents = process_tree()
        found, pending = [], list(parents.get(str(os.getpid()), []))
        while pending:
            pid = pending.pop()
            found.append(pid)
            pending.extend(parents.get(pid, []))
        return found

    def _enter_namespaces(self) -> None:
        """New PID, network, IPC and UTS namespaces (and a user namespace when not root). The mount namespace
        is the init's alone: the launcher keeps the host's view, and its ``/proc``."""
        flags = kernel.CLONE_NEWPID | kernel.CLONE_NEWNET | kernel.CLONE_NEWIPC | kernel.CLONE_NEWUTS
        if os.geteuid() == 0:
            kernel.unshare(flags)
            self.report("info", "variant", "root")
            return
        uid, gid = self.owner
        kernel.unshare(flags | kernel.CLONE_NEWUSER)
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(text)
        self.report("info", "variant", "user")

    def _init(self, lifeline: int) -> None:
        """PID 1 of the namespace: build the root, run the program, wait for it, end (never returns).
        ``lifeline`` reads a pipe the launcher holds open: at its end, the launcher died before the death
        signal was armed."""
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)
            os.set_blocking(lifeline, False)
            try:
                if os.read(lifeline, 1) == b"":
                    os._exit(1)
            except BlockingIOError:
                pass
            os.close(lifeline)
            kernel.unshare(kernel.CLONE_NEWNS)
            spec = self.spec
            for note in mounts.enter_root(
                spec["stage"], spec["folder"], spec["folder_mb"], self.owner, spec["visible"]
            ):
                self.report("note", note)
            program = os.fork()
            if program == 0:
                self._start_program()
            self.report("exit", _wait_for(program))
            os._exit(0)
        except BaseException as error:  # noqa: BLE001 - reported, then this process ends
            self.report("error", f"building the sandbox: {error}")
            os._exit(1)

    def _start_program(self) -> None:
        """In the forked child: join the cgroups, drop privileges, confine, exec the interpreter (never returns)."""
        spec = self.spec
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            for fd in self.cgroups:
                os.write(fd, b"0")
            if self.keep_root:
                try:
                    os.setgroups([])  # uid 0 stays; the caller's other groups go
                except PermissionError:  # setgroups denied (a user namespace): there are none to drop
                    pass
                kernel.drop_capabilities()
            elif os.geteuid() == 0:
                uid, gid = self.owner
                os.setgroups([])
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)
            kernel.prctl(kernel.PR_SET_PDEATHSIG, signal.SIGKILL)
            kernel.prctl(kernel.PR_SET_NO_NEW_PRIVS, 1)
            if spec["mode"] == "landlock":
                devices = [f"/dev/{name}" for name in mounts.DEVICES]
                landlock.restrict(spec["visible"], devices, [spec["folder"]], landlock.abi())
            os.chdir(spec["folder"])
            limits = f"{spec['limits']},{self.process_limit}"
            site = SEPARATOR.join(spec["site"])
            arguments = [str(spec["events_fd"]), spec["folder"], limits, "1" if spec["audit"] else "0", site]
            python = spec["python"]
            os.execve(python, [python, "-I", "-S", "-c", PROGRAM, *arguments], spec["env"])
        except BaseException as error:  # noqa: BLE001 - reported, then this process ends
            self.report("error", f"starting the program: {error}")
            os._exit(127)


def _others_can_reach(spec: dict) -> bool:
    """Whether a user other than the owner may walk to the interpreter, the visible paths and the folder."""
    for path in [os.path.realpath(spec["python"]), spec["folder"], *spec["visible"]]:
        folder = os.path.dirname(os.path.realpath(path))
        while folder != "/":
            if not os.stat(folder).st_mode & 0o001:
                return False
            folder = os.path.dirname(folder)
    return True


def _wait_for(child: int) -> int:
    """Reap children until ``child`` ends; its exit code (negative: the signal that killed it)."""
    while True:
        pid, status = os.wait()
        if pid == child:
            return os.waitstatus_to_exitcode(status)


def process_tree() -> dict[str, list[str]]:
    """The PIDs of this host's processes by their parent's PID (all as strings), read from ``/proc``."""
    parents: dict[str, list[str]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                parents.setdefault(handle.read().rsplit(b")", 1)[1].split()[1].decode(), []).append(pid)
        except (OSError, IndexError):
            continue
    return parents


def _has_children() -> bool:
    """Whether this process has a child, running or not yet reaped (with none, it has no descendant left)."""
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return False
    return True


def _kill_descendants() -> None:
    """SIGKILL every descendant of this process and reap them, until none is left. A child subreaper inherits
    every orphan of its tree, so a process forked meanwhile is found in the next round."""
    me = str(os.getpid())
    while _has_children():
        parents = process_tree()
        queue = list(parents.get(me, []))
        killed = bool(queue)
        while queue:
            pid = queue.pop()
            queue.extend(parents.get(pid, []))
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(-1, 0 if killed else os.WNOHANG)
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            return


def launch(arguments: list[str], stdio: tuple[int, int, int]) -> None:
    """In a process of its own: run the launcher on the spec ``arguments`` with ``stdio`` as the program's
    standard input, output and error; end with the launcher (never returns). A failure to confine is
    reported, and the program never runs."""
    code, launcher = 1, None
    signal.signal(signal.SIGTERM, _stop)
    try:
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
            os.close(fd)
        launcher = Launcher(parse_spec(arguments))
        launcher.run()
        code = 0
    except Stopped:
        _kill_descendants()
        if launcher is not None:
            launcher.report("stopped")
    except BaseException as error:  # noqa: BLE001 - reported; this process ends here whatever happened
        if launcher is not None:
            launcher.report("error", f"confining the program: {error!r}")
        _kill_descendants()
    finally:
        os._exit(code)
