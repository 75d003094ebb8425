"""The first code a sandboxed program's interpreter runs (``python -I -S -c <this file> EVENTS FOLDER LIMITS AUDIT
SITE``): resource limits, the audit hook, then ``main.py`` as ``__main__``.

When it starts, the launcher has already confined the process through the kernel (namespaces or Landlock, no
privileges). This file adds what only the interpreter can do:

1. the resource limits ``LIMITS`` = ``CPU,MEMORY,FILE,PROCESSES`` (seconds, bytes, bytes, a count; ``-1``
   leaves the number of processes as it is);
2. with ``AUDIT`` = ``1``, the friendly layer: an audit hook (PEP 578) that refuses network sockets, process
   creation and signals, ``ctypes``, native code from outside the interpreter's folders, sub-interpreters,
   hand-built code objects and writes outside ``FOLDER`` (metadata too: ``chmod``, ``chown``, ``utime``,
   extended attributes), and names each refusal on the descriptor ``EVENTS`` (``blocked ...``), so that the
   caller reports a refused action as such rather than as a failure. The functions that raise no audit
   event (``mkfifo``, ``mknod``, ``pidfd_open``, ``pidfd_send_signal``: :data:`UNAUDITED`) are replaced by
   ones that raise one, and builtin modules are made through the hook, which refuses to make ``posix``,
   ``_signal`` or ``_imp`` afresh (a fresh one would hold the originals);
3. a ``MemoryError`` that ends the program is reported on ``EVENTS`` (``memory``).

``SITE`` holds the interpreter's site-packages folders (joined by ``\x1f``): they are put on ``sys.path``
without running ``site`` and its ``.pth`` files, which would cost more than the rest of the start-up.

The hook's state is captured when it is made: frozen sets, strings and C functions. It reads no module
global and no builtin when it runs, so nothing the program imports, replaces or reaches through frames
changes what it refuses. It is still Python: a program can get around it (a path object that names another
file the second time it is asked), which is why the kernel's confinement is the boundary.

This file imports nothing from rlcore.
"""

import _imp
import _signal  # not signal: that module imports enum, which would double the start-up time
import os
import resource
import sys
from _collections_abc import Callable  # (already loaded: collections.abc would cost start-up time)

#: functions that act outside the program without raising an audit event, and the event each raises instead
#: once :func:`replace_unaudited` has replaced it (refused): a FIFO or a device node anywhere, a signal to
#: any process (``pidfd_send_signal`` takes a ``/proc/PID`` folder too)
UNAUDITED = {
    "mkfifo": "os.mkfifo",
    "mknod": "os.mknod",
    "pidfd_open": "os.pidfd_open",
    "pidfd_send_signal": "signal.pidfd_send_signal",
}
#: the event :func:`mediate_builtin_modules` raises to have the hook make a builtin module
CREATE_BUILTIN_EVENT = "rlcore_plugin_sandbox.create_builtin"
#: builtin modules that are never made again (a fresh one would hold the original functions of UNAUDITED, or
#: the original ``create_builtin``)
NOT_RECREATED = frozenset({"posix", "_signal", "_imp"})
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
        *UNAUDITED.values(),
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
        "os.setxattr",
        "os.removexattr",
        "shutil.rmtree",
        "sqlite3.connect",
    }
)
TWO_PATH_EVENTS = frozenset({"os.rename", "os.link", "os.symlink"})
#: the write events that change a file's metadata: on a descriptor (``fchmod``), the file it names is checked
METADATA_EVENTS = frozenset({"os.chmod", "os.chown", "os.utime", "os.setxattr", "os.removexattr"})
#: ``fcntl`` commands and ``ioctl`` requests that name a process to receive SIGIO (F_SETOWN, F_SETOWN_EX;
#: FIOSETOWN, SIOCSPGRP): its default action ends that process
OWNER_COMMANDS = frozenset({8, 15, 0x8901, 0x8902})
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


def make_hook(folder: str, events: int, native_roots: list[str]) -> Callable[[str, tuple], None]:
    """The audit hook: refuses the forbidden events, changes outside ``folder``, native code from outside
    ``native_roots`` (or from ``folder``) and signals to other processes, reporting each on ``events``. It
    also makes builtin modules for :func:`mediate_builtin_modules` (the original ``_imp.create_builtin`` is
    kept only here)."""
    inside = folder.rstrip("/") + "/"
    roots = tuple(root.rstrip("/") + "/" for root in native_roots)
    forbidden, forbidden_modules, write_flags = FORBIDDEN_EVENTS, FORBIDDEN_MODULES, WRITE_FLAGS
    write_events, metadata_events, two_path_events = WRITE_EVENTS, METADATA_EVENTS, TWO_PATH_EVENTS
    max_links = MAX_LINKS
    owner_commands, not_recreated, create_event = OWNER_COMMANDS, NOT_RECREATED, CREATE_BUILTIN_EVENT
    lstat, readlink, getcwd, getpid, write = os.lstat, os.readlink, os.getcwd, os.getpid, os.write
    create_builtin, namespace = _imp.create_builtin, type(sys.implementation)
    type_of, text, raw, number, listing, failure, denied = type, str, bytes, int, list, OSError, PermissionError

    def resolve(path):
        """``path`` absolute, with ``..`` and symbolic links resolved as the kernel would."""
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
        return "/" + "/".join(parts) + "/"

    def hook(event, args):
        refused = None
        paths = ()
        if event in forbidden:
            refused = event
        elif event == "import":
            name, origin = args[0], args[1]
            if type_of(name) is text and name.partition(".")[0] in forbidden_modules:
                refused = "import " + name
            elif type_of(origin) is text:  # an extension module: native code, loaded from this file
                where = resolve(origin)
                if where.startswith(inside) or not where.startswith(roots):
                    refused = "import of native code from " + origin + " (outside the interpreter's folders)"
        elif event == create_event:
            name, made = args[0], args[1]
            if type_of(name) is not text or type_of(made) is not listing:
                refused = event
            elif name in not_recreated or name in forbidden_modules:
                refused = "making the module " + name + " again"
            else:
                made.append(create_builtin(namespace(name=name)))
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
        elif event == "fcntl.fcntl" or event == "fcntl.ioctl":
            if type_of(args[1]) is number and args[1] in owner_commands:
                refused = event + " naming a process to signal"
        elif event == "resource.prlimit":
            if args[2] is not None and not (type_of(args[0]) is number and args[0] in (0, getpid())):
                refused = "resource.prlimit of another process"
        for path in paths:
            if type_of(path) is number and event in metadata_events:
                try:  # a descriptor: the file it names (a pipe or a socket has no path)
                    path = readlink("/proc/self/fd/" + text(path))
                except failure:
                    refused = event + " on a descriptor whose file cannot be named"
                    continue
                if not path.startswith("/"):
                    continue
            if type_of(path) is raw:
                path = path.decode("utf-8", "surrogateescape")
            if type_of(path) is not text or path in ("", ":memory:"):
                continue  # a path object, or a descriptor of a write already checked: left to the kernel
            if not resolve(path).startswith(inside):
                refused = event + " on " + path + " (outside the working directory)"
        if refused is not None:
            write(events, ("blocked " + refused + "\n").encode("utf-8", "replace"))
            raise denied("sandbox: " + refused + " is not allowed")

    return hook


def replace_unaudited() -> None:
    """Replace each function of :data:`UNAUDITED` by one that raises its audit event (which the hook refuses),
    in every loaded module that holds it and in the ``os.supports_*`` sets."""
    audit = sys.audit

    def stand_in(event: str) -> Callable[..., None]:
        def refused(*args: object, **kwargs: object) -> None:
            audit(event, *args)
            raise PermissionError("sandbox: " + event + " is not allowed")

        return refused

    replaced: dict[int, tuple[object, Callable[..., None]]] = {}
    for module in (sys.modules.get(name) for name in ("posix", "os", "_signal", "signal")):
        for name, event in UNAUDITED.items():
            if module is not None and hasattr(module, name):
                original = getattr(module, name)
                replaced[id(original)] = replaced.get(id(original)) or (original, stand_in(event))
                setattr(module, name, replaced[id(original)][1])
    for functions in (os.supports_dir_fd, os.supports_fd, os.supports_follow_symlinks, os.supports_effective_ids):
        for original, stand_in_function in replaced.values():
            if original in functions:
                functions.discard(original)
                functions.add(stand_in_function)


def mediate_builtin_modules() -> None:
    """Make ``_imp.create_builtin`` (how importlib makes a builtin module) ask the hook, which refuses to make
    ``posix``, ``_signal`` or ``_imp`` again: a fresh one would hold the functions :func:`replace_unaudited` took
    away. Call it after the hook is installed."""
    audit, text, event = sys.audit, str, CREATE_BUILTIN_EVENT

    def create_builtin(spec: object) -> object:
        name = getattr(spec, "name", None)
        if type(name) is not text:
            raise TypeError("the module spec's name must be a str")
        made: list[object] = []
        audit(event, name, made)
        return made[0]

    _imp.create_builtin = create_builtin  # type: ignore[assignment]


def main() -> None:
    """Limit this process, install the hook, then run ``main.py`` from the working directory as ``__main__``."""
    events, folder, limits, audit, site = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1", sys.argv[5]
    sites = [path for path in site.split("\x1f") if path]
    sys.path.extend(sites)
    limit_resources(limits)
    with open("main.py", "rb") as handle:
        source = handle.read()  # bytes: compiled as ``python main.py`` would (a coding line, invalid UTF-8)
    module = type(sys)("__main__")
    module.__file__ = "main.py"
    sys.modules["__main__"] = module
    sys.argv = ["main.py"]
    if audit:
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sites}
        sys.addaudithook(make_hook(folder, events, sorted(os.path.realpath(path) for path in prefixes)))
        replace_unaudited()
        mediate_builtin_modules()
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
