"""The first code a sandboxed program's interpreter runs (``python -I -S -c <this file> EVENTS FOLDER LIMITS AUDIT
SITE``): resource limits, the audit hook, then ``main.py`` as ``__main__``.

When it starts, the launcher has already confined the process through the kernel (namespaces or Landlock, no
privileges). This file adds what only the interpreter can do:

1. the resource limits ``LIMITS`` = ``CPU,MEMORY,FILE,PROCESSES`` (seconds, bytes, bytes, a count; ``-1``
   leaves the number of processes as it is);
2. with ``AUDIT`` = ``1``, the friendly layer: an audit hook (PEP 578) that refuses network sockets, process
   creation and signals, ``ctypes``, sub-interpreters, hand-built code objects and writes outside ``FOLDER``,
   and names each refusal on the descriptor ``EVENTS`` (``blocked ...``), so that the caller reports a refused
   action as such rather than as a failure;
3. a ``MemoryError`` that ends the program is reported on ``EVENTS`` (``memory``).

``SITE`` holds the interpreter's site-packages folders (joined by ``\x1f``): they are put on ``sys.path``
without running ``site`` and its ``.pth`` files, which would cost more than the rest of the start-up.

The hook's state is captured when it is made: frozen sets, strings and C functions. It reads no module
global and no builtin when it runs, so nothing the program imports, replaces or reaches through frames
changes what it refuses. It is still Python: a program can get around it (a path object that names another
file the second time it is asked), which is why the kernel's confinement is the boundary.

This file imports nothing from rlcore.
"""

import _signal  # not signal: that module imports enum, which would double the start-up time
import os
import resource
import sys

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
        "code.__new__",
        "cpython.PyInterpreterState_New",
    }
)
#: modules whose import is refused: they reach the C library, start processes or interpreters without an event
FORBIDDEN_MODULES = frozenset(
    {
        "ctypes",
        "_ctypes",
        "_posixsubprocess",
        "cffi",
        "_cffi_backend",
        "_xxsubinterpreters",
        "_testcapi",
        "_testinternalcapi",
    }
)
#: audit events whose first argument is a path the program changes (the second too, for the two-path ones)
WRITE_EVENTS = frozenset(
    {
        "os.remove",
        "os.rmdir",
        "os.mkdir",
        "os.chmod",
        "os.chown",
        "os.truncate",
        "os.utime",
        "shutil.rmtree",
        "sqlite3.connect",
    }
)
TWO_PATH_EVENTS = frozenset({"os.rename", "os.link", "os.symlink"})
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
#: symbolic links followed when resolving one path, as the kernel does
MAX_LINKS = 40


def limit_resources(spec: str) -> None:
    """Apply ``CPU,MEMORY,FILE,PROCESSES`` as rlimits; an oversized write then fails (EFBIG), not the process."""
    cpu, memory, file_size, processes = (int(part) for part in spec.split(","))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if processes >= 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_IGN)


def make_hook(folder: str, events: int):
    """The audit hook: refuses the forbidden events and changes outside ``folder``, reporting each on ``events``."""
    inside = folder.rstrip("/") + "/"
    forbidden, forbidden_modules, write_flags = FORBIDDEN_EVENTS, FORBIDDEN_MODULES, WRITE_FLAGS
    write_events, two_path_events, max_links = WRITE_EVENTS, TWO_PATH_EVENTS, MAX_LINKS
    lstat, readlink, getcwd, write = os.lstat, os.readlink, os.getcwd, os.write
    type_of, text, raw, number, failure, denied = type, str, bytes, int, OSError, PermissionError

    def hook(event, args):
        refused = None
        paths = ()
        if event in forbidden:
            refused = event
        elif event == "import":
            if type_of(args[0]) is text and args[0].partition(".")[0] in forbidden_modules:
                refused = "import " + args[0]
        elif event == "open":
            mode, flags = args[1], args[2]
            if type_of(mode) is text and ("w" in mode or "a" in mode or "x" in mode or "+" in mode):
                paths = args[:1]
            elif type_of(flags) is number and flags & write_flags:
                paths = args[:1]
        elif event in write_events:
            paths = args[:1]
        elif event in two_path_events:
            paths = args[:2]
        for path in paths:
            if type_of(path) is raw:
                path = path.decode("utf-8", "surrogateescape")
            if type_of(path) is not text or path in ("", ":memory:"):
                continue  # a descriptor or a path object: left to the kernel
            pending = (path if path.startswith("/") else getcwd() + "/" + path).split("/")[::-1]
            parts = []
            links = 0
            while pending:
                part = pending.pop()
                if part in ("", "."):
                    continue
                if part == "..":
                    parts = parts[:-1]
                    continue
                candidate = "/" + "/".join(parts + [part])
                try:
                    is_link = lstat(candidate).st_mode & 0o170000 == 0o120000
                except failure:
                    is_link = False
                if is_link and links < max_links:
                    links += 1
                    target = readlink(candidate)
                    parts = [] if target.startswith("/") else parts
                    pending.extend(target.split("/")[::-1])
                else:
                    parts.append(part)
            resolved = "/" + "/".join(parts)
            if resolved + "/" != inside and not resolved.startswith(inside):
                refused = event + " on " + path + " (outside the working directory)"
        if refused is not None:
            write(events, ("blocked " + refused + "\n").encode("utf-8", "replace"))
            raise denied("sandbox: " + refused + " is not allowed")

    return hook


def main() -> None:
    """Limit this process, install the hook, then run ``main.py`` from the working directory as ``__main__``."""
    events, folder, limits, audit, site = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1", sys.argv[5]
    sys.path.extend(path for path in site.split("\x1f") if path)
    limit_resources(limits)
    with open("main.py", encoding="utf-8") as handle:
        source = handle.read()
    module = type(sys)("__main__")
    module.__file__ = "main.py"
    sys.modules["__main__"] = module
    sys.argv = ["main.py"]
    if audit:
        sys.addaudithook(make_hook(folder, events))
    try:
        exec(compile(source, "main.py", "exec"), module.__dict__)
    except SystemExit:
        raise
    except BaseException as error:  # the program's own failure: its traceback, without this file's frame
        if isinstance(error, MemoryError):
            os.write(events, b"memory\n")
        import traceback  # only now: it is slow to import, and most programs never need it

        traceback.print_exception(type(error), error, error.__traceback__.tb_next if error.__traceback__ else None)
        sys.exit(1)


if __name__ == "__main__":
    main()
