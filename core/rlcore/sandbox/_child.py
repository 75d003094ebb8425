"""The first code a sandboxed program's interpreter runs (``python -I _child.py FD DIR MAIN CPU,MEMORY,FILE``).

It confines the process before the untrusted program starts, then runs it as ``__main__``:

1. it sets the resource limits (CPU seconds, address space and file size in bytes), and leaves the host's
   network by entering new user and network namespaces when the kernel allows it (only a loopback, down);
2. an audit hook (PEP 578) refuses, for the rest of the process's life, network sockets, process creation
   (fork, exec, subprocess, spawn, signals to other processes), writing, renaming or deleting anything
   outside ``DIR``, and loading ``ctypes`` (which could call the C library around the hook);
3. every refusal and a ``MemoryError`` are reported on the channel file descriptor ``FD``, one line each,
   so the parent can tell a blocked or memory-starved program from one that merely failed.

This file must import nothing from rlcore: the interpreter runs isolated (``-I``), without the package.
"""

import os
import resource
import signal
import sys
import traceback

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

#: audit events that are refused whatever their arguments
FORBIDDEN_EVENTS = frozenset(
    {
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.kill",
        "os.killpg",
        "signal.pthread_kill",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.call_function",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "sys.setprofile",
        "sys.settrace",
    }
)
#: modules whose import is refused: they reach the C library or start processes without an audit event
FORBIDDEN_MODULES = frozenset({"ctypes", "_ctypes", "_posixsubprocess", "cffi", "_cffi_backend"})
#: audit events whose first argument is a path the program changes (the second too, for the two-path ones)
WRITE_EVENTS = frozenset(
    {"os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate", "os.utime", "shutil.rmtree"}
)
TWO_PATH_EVENTS = frozenset({"os.rename", "os.link", "os.symlink"})
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def enter_network_namespace() -> bool:
    """Move this (single-threaded) process into fresh user + network namespaces; False where not allowed."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0
    except (OSError, AttributeError):
        ok = False
    for name in ("ctypes", "ctypes._endian", "_ctypes"):
        sys.modules.pop(name, None)
    return ok


def limit_resources(spec: str) -> None:
    """Apply ``CPU,MEMORY,FILE`` (seconds, bytes, bytes) as rlimits; an oversized write then fails (EFBIG)."""
    cpu, memory, file_size = (int(part) for part in spec.split(","))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def make_hook(root: str, report):
    """An audit hook that refuses the forbidden events and writes outside ``root``, reporting each."""
    inside = root.rstrip(os.sep) + os.sep
    fspath, realpath, fsdecode = os.fspath, os.path.realpath, os.fsdecode

    def outside(path) -> bool:
        if isinstance(path, int) or path is None:
            return False
        resolved = realpath(fsdecode(fspath(path)))
        return resolved != root and not resolved.startswith(inside)

    def refuse(what: str) -> None:
        report(f"blocked {what}")
        raise PermissionError(f"sandbox: {what} is not allowed")

    def hook(event: str, args: tuple) -> None:
        if event in FORBIDDEN_EVENTS:
            refuse(event)
        elif event == "import" and args[0].partition(".")[0] in FORBIDDEN_MODULES:
            refuse(f"import {args[0]}")
        elif event == "open":
            path, mode, flags = args
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS
            )
            if writes and outside(path):
                refuse(f"writing {fsdecode(fspath(path))} (outside the working directory)")
        elif event in WRITE_EVENTS and args and outside(args[0]):
            refuse(f"{event} on {fsdecode(fspath(args[0]))} (outside the working directory)")
        elif event in TWO_PATH_EVENTS and (outside(args[0]) or outside(args[1])):
            refuse(f"{event} outside the working directory")

    return hook


def main() -> None:
    """Confine this process, then run the program file as ``__main__``."""
    channel_fd, root, program = int(sys.argv[1]), os.path.realpath(sys.argv[2]), sys.argv[3]
    limit_resources(sys.argv[4])

    def report(line: str) -> None:
        try:
            os.write(channel_fd, (line + "\n").encode())
        except OSError:
            pass

    report("network-namespace" if enter_network_namespace() else "no-network-namespace")
    with open(program, encoding="utf-8") as handle:
        source = handle.read()
    name = os.path.basename(program)
    sys.argv = [name]
    sys.addaudithook(make_hook(root, report))
    namespace = {"__name__": "__main__", "__file__": name, "__builtins__": __builtins__}
    try:
        exec(compile(source, name, "exec"), namespace)
    except SystemExit:
        raise
    except BaseException as error:  # the program's own failure: its traceback, without this file's frame
        if isinstance(error, MemoryError):
            report("memory")
        traceback.print_exception(type(error), error, error.__traceback__.tb_next if error.__traceback__ else None)
        sys.exit(1)


if __name__ == "__main__":
    main()
