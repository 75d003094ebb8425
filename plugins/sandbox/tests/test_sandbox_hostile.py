"""Hostile programs against the kernel's confinement: each escape the issue found, run with the audit hook and
without it (``audit_hook=False``: only the kernel confines), and a program that attacks the hook first.

Each test checks the host afterwards (files, processes), not only what the sandbox reports. They need a
host where the sandbox reaches the ``full`` level (the CI machine: root, or user namespaces); elsewhere they
skip, and ``test_sandbox_host.py`` tests the refusal.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from rlcore_plugin_sandbox import SandboxLimits, host_isolation, run_python
from rlcore_plugin_sandbox.check import kernel_buffer_hog, setsid_sleeper, still_running
from rlcore_plugin_sandbox.view import visible_paths

LIMITS = SandboxLimits(cpu_seconds=2, wall_seconds=4, memory_mb=256, output_bytes=4000)

pytestmark = pytest.mark.skipif(
    host_isolation().level != "full", reason=f"the sandbox is {host_isolation().summary()} on this host"
)
hook_on_and_off = pytest.mark.parametrize("audit_hook", [True, False], ids=["hook", "kernel-only"])


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A folder outside the sandbox that anyone may write (so that only the sandbox stops a write), holding
    ``victim.txt`` and ``secret.txt``."""
    tmp_path.chmod(0o777)
    (tmp_path / "victim.txt").write_text("precious")
    (tmp_path / "secret.txt").write_text("the run's token")
    (tmp_path / "secret.txt").chmod(0o644)
    return tmp_path


def untouched(folder: Path) -> None:
    """``folder`` still holds exactly ``victim.txt`` (intact, mode unchanged) and ``secret.txt``."""
    assert sorted(p.name for p in folder.iterdir()) == ["secret.txt", "victim.txt"]
    assert (folder / "victim.txt").read_text() == "precious"
    assert stat.S_IMODE((folder / "victim.txt").stat().st_mode) == 0o644


@hook_on_and_off
def test_dir_fd_writes_and_deletes_do_not_reach_outside(victim: Path, audit_hook: bool) -> None:
    code = f"""
import os
for folder in ({str(victim)!r}, "/", "/usr", os.path.dirname(os.getcwd())):
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError as error:
        print("open", folder, error.errno)
        continue
    for attempt in (
        lambda: os.close(os.open("new.txt", os.O_CREAT | os.O_WRONLY, dir_fd=fd)),
        lambda: os.unlink("victim.txt", dir_fd=fd),
        lambda: os.mkdir("made", dir_fd=fd),
        lambda: os.rename("victim.txt", "moved.txt", src_dir_fd=fd, dst_dir_fd=fd),
    ):
        try:
            attempt()
            print("ESCAPED", folder)
        except OSError as error:
            print("refused", folder, error.errno)
"""
    result = run_python(code, limits=LIMITS, audit_hook=audit_hook)
    assert "ESCAPED" not in result.stdout, result
    untouched(victim)


@hook_on_and_off
def test_sqlite_cannot_create_a_database_outside(victim: Path, audit_hook: bool) -> None:
    code = f"import sqlite3\nsqlite3.connect({str(victim / 'stolen.db')!r}).execute('create table t (x)')"
    result = run_python(code, limits=LIMITS, audit_hook=audit_hook)
    assert result.status == ("blocked" if audit_hook else "error"), result
    untouched(victim)


@hook_on_and_off
def test_fchmod_and_mkfifo_do_not_act_outside(victim: Path, audit_hook: bool) -> None:
    code = f"""
import os
for attempt in (
    lambda: os.fchmod(os.open({str(victim / "victim.txt")!r}, os.O_RDONLY), 0o777),
    lambda: os.chmod({str(victim / "victim.txt")!r}, 0o777),
    lambda: os.mkfifo({str(victim / "fifo")!r}),
    lambda: os.mknod({str(victim / "node")!r}),
):
    try:
        attempt()
        print("ESCAPED")
    except OSError as error:
        print("refused", error.errno)
"""
    result = run_python(code, limits=LIMITS, audit_hook=audit_hook)
    assert "ESCAPED" not in result.stdout and result.stdout.count("refused") == 4, result
    untouched(victim)


@hook_on_and_off
def test_secrets_outside_are_not_readable(victim: Path, audit_hook: bool) -> None:
    code = f"""
import os
for path in ({str(victim / "secret.txt")!r}, "/etc/shadow", "/etc/passwd", "/root/.bashrc", {str(victim)!r}):
    try:
        print("READ", path, open(path).read()[:20] if os.path.isfile(path) else os.listdir(path))
    except OSError as error:
        print("refused", path, error.errno)
print(sorted(os.listdir({str(Path.home())!r})) if os.path.isdir({str(Path.home())!r}) else [])
"""
    result = run_python(code, limits=LIMITS, audit_hook=audit_hook)
    assert result.status == "ok" and "READ" not in result.stdout, result
    assert "the run's token" not in result.stdout
    # of the home folder, only the way to a visible interpreter (a pyenv or a virtual environment in it)
    home = [
        name for name in os.listdir(Path.home()) if any(p.startswith(f"{Path.home()}/{name}") for p in visible_paths())
    ]
    assert result.stdout.splitlines()[-1] == str(sorted(home))


def test_a_setsid_grandchild_dies_when_the_call_returns() -> None:
    marker = f"{uuid.uuid4().int % 10**9}.25"  # sleep's argument: a command line no other process has
    code = f"""
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-S", "-c", "import time; time.sleep({marker})"])
    os._exit(0)
time.sleep(0.5)
print("started", flush=True)
time.sleep(60)
"""
    result = run_python(code, limits=SandboxLimits(wall_seconds=1.5), audit_hook=False)
    assert result.status == "timeout" and result.stdout == "started\n", result
    assert not still_running(marker)
    time.sleep(0.5)
    assert not still_running(marker)


def test_a_grandchild_dies_with_a_program_that_returns_at_once() -> None:
    marker = f"{uuid.uuid4().int % 10**9}.5"
    result = run_python(setsid_sleeper(marker) + "print('left it running')", limits=LIMITS, audit_hook=False)
    assert result.status == "ok", result
    assert not still_running(marker)


def test_a_program_dies_with_a_caller_that_is_killed(tmp_path: Path) -> None:
    """Nobody would stop it at its wall time: the launcher server kills it when its caller's socket closes,
    and removes its folder and cgroups."""
    marker = f"{uuid.uuid4().int % 10**9}.375"
    program = setsid_sleeper(marker) + "import time\ntime.sleep(100)"
    caller = (  # the program comes on stdin, so that the caller's own command line has no marker
        "import sys\nfrom rlcore_plugin_sandbox import SandboxLimits, run_python\n"
        "run_python(sys.stdin.read(), limits=SandboxLimits(wall_seconds=100), audit_hook=False)"
    )
    layout = host_isolation().cgroups
    cgroup_folders = set() if layout is None else {Path(layout.memory), Path(layout.pids)}
    # cgroups an earlier caller left behind, maybe under the PID this caller gets (PIDs are reused)
    before = {path for folder in cgroup_folders for path in folder.glob("rlcore-sandbox-*")}
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    process = subprocess.Popen([sys.executable, "-c", caller], env=env, stdin=subprocess.PIPE, text=True)
    assert process.stdin is not None
    process.stdin.write(program)
    process.stdin.close()
    try:
        deadline = time.monotonic() + 60
        while not still_running(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert still_running(marker) and list(tmp_path.glob("rlcore-sandbox-*"))
    finally:
        process.kill()
        process.wait()

    def left() -> list[Path]:
        """The program's folder and cgroups still there (the server removes the cgroups after the folder)."""
        named = (path for folder in cgroup_folders for path in folder.glob(f"rlcore-sandbox-{process.pid}-*"))
        cgroups = [path for path in named if path not in before]
        return [*tmp_path.glob("rlcore-sandbox-*"), *cgroups]

    deadline = time.monotonic() + 10
    while (still_running(marker) or left()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not still_running(marker) and not left()


def test_a_fork_bomb_stops_at_the_process_limit() -> None:
    limits = SandboxLimits(cpu_seconds=2, wall_seconds=4, memory_mb=128, max_processes=8)
    code = """
import os, time
children = 0
while children < 200:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    children += 1
print(children)
"""
    result = run_python(code, limits=limits, audit_hook=False)
    assert result.status == "ok", result
    assert 1 <= int(result.stdout) < limits.max_processes


def test_children_share_one_memory_bound() -> None:
    if host_isolation().cgroups is None:
        pytest.skip("no memory cgroup on this host: memory is bounded per process times max_processes")
    code = """
import os, sys, time
for _ in range(6):
    if os.fork() == 0:
        try:
            block = b"x" * (200 << 20)
            sys.stdout.write("held\\n")
            sys.stdout.flush()
            time.sleep(5)
        finally:
            os._exit(0)
time.sleep(3)
"""
    result = run_python(code, limits=SandboxLimits(wall_seconds=5, memory_mb=256), audit_hook=False)
    # one bound for all: the six 200 MB blocks never all fit (a per-process bound would let each of them hold its
    # block); a child the kernel kills for the cgroup frees its block, so on a loaded machine a later one may hold
    # one too: "at most one" is not the invariant, "not all six" is
    assert result.stdout.count("held") < 6, result
    assert result.status == "memory", result


def test_pipe_and_socket_buffers_count_against_the_memory_bound() -> None:
    """``RLIMIT_AS`` does not count the kernel's buffers: a program with ``memory_mb=64`` fills pipes and
    socket pairs with up to 192 MB. The memory cgroup counts them and stops it; without one the host does not
    claim to bound memory (``test_an_unprivileged_user_gets_namespaces_of_its_own``)."""
    host = host_isolation()
    if host.cgroups is None:
        pytest.skip(f"no per-program cgroup here ({host.cgroup_reason}): memory is reported as not enforced")
    limits = SandboxLimits(cpu_seconds=2, wall_seconds=4, memory_mb=64)
    result = run_python(kernel_buffer_hog(192), limits=limits, audit_hook=False)
    assert (result.status, result.stdout) == ("memory", ""), result


def test_there_is_no_network_even_without_the_hook() -> None:
    code = """
import socket
for family, kind, address in (
    (socket.AF_INET, socket.SOCK_STREAM, ("1.1.1.1", 80)),
    (socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 22)),
    (socket.AF_INET, socket.SOCK_DGRAM, ("8.8.8.8", 53)),
):
    try:
        with socket.socket(family, kind) as sock:
            sock.settimeout(1)
            sock.connect(address)
            sock.send(b"x")
            print("ESCAPED", address)
    except OSError as error:
        print("refused", address, error.errno)
print(open("/proc/net/dev").read())
"""
    result = run_python(code, limits=LIMITS, audit_hook=False)
    assert "ESCAPED" not in result.stdout and result.stdout.count("refused") == 3, result
    assert [line.split(":")[0].strip() for line in result.stdout.splitlines() if line.strip().startswith("lo:")] == [
        "lo"
    ]


def test_the_program_has_no_privileges() -> None:
    code = """
import os
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
print(os.getuid(), status["CapEff"].strip(), status["CapBnd"].strip() if os.getuid() == 0 else "-", status["NoNewPrivs"].strip())
"""
    result = run_python(code, limits=LIMITS, audit_hook=False)
    uid, effective, _, no_new_privs = result.stdout.split()
    assert int(uid) != 0 and int(effective, 16) == 0 and no_new_privs == "1", result


HOOK_ATTACK = """
import builtins, sys
frame = sys._getframe()
while frame.f_back is not None:
    frame = frame.f_back
hook_module = frame.f_globals
for name in ("FORBIDDEN_EVENTS", "FORBIDDEN_MODULES", "WRITE_EVENTS", "TWO_PATH_EVENTS"):
    hook_module[name] = frozenset()
hook_module["WRITE_FLAGS"] = 0
type_before = builtins.type
builtins.type = lambda value: str
builtins.PermissionError = None
os_before = sys.modules["os"]
sys.modules["os"] = type_before(sys)("os")
import __main__
__main__.FORBIDDEN_EVENTS = frozenset()
print("hook attacked")
import os as real_os
"""
ESCAPES = {
    "fork": "pid = real_os.fork()\nif pid == 0: real_os._exit(0)",
    "ctypes": "import ctypes\nctypes.CDLL(None).getpid()",
    "write": "open({victim!r}, 'a').write('owned')",
    "socket": "builtins.type, sys.modules['os'] = type_before, os_before  # the socket module needs them\n"
    "import socket\nsocket.socket().connect(('127.0.0.1', 22))",
}


@pytest.mark.parametrize("escape", sorted(ESCAPES))
def test_a_program_that_attacks_the_hook_is_still_refused_by_it(victim: Path, escape: str) -> None:
    code = HOOK_ATTACK.replace("import os as real_os", "import posix as real_os") + ESCAPES[escape].format(
        victim=str(victim / "victim.txt")
    )
    result = run_python(code, limits=LIMITS)
    assert result.stdout.startswith("hook attacked"), result
    assert result.status == "blocked" and result.blocked, result
    untouched(victim)


def test_escapes_without_the_hook_are_stopped_by_the_kernel(victim: Path) -> None:
    code = f"""
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
print("ctypes loaded", libc.getpid() > 0)
for name, attempt in (
    ("write", lambda: open({str(victim / "victim.txt")!r}, "a").write("owned")),
    ("create", lambda: open({str(victim / "new.txt")!r}, "w").write("owned")),
    ("connect", lambda: socket.create_connection(("1.1.1.1", 80), timeout=1)),
    ("mount", lambda: libc.mount(b"none", b"/usr", b"tmpfs", 0, None) == 0 or (_ for _ in ()).throw(OSError(ctypes.get_errno(), "mount"))),
    ("setuid", lambda: os.setuid(0)),
):
    try:
        attempt()
        print("ESCAPED", name)
    except OSError as error:
        print("refused", name, error.errno)
"""
    result = run_python(code, limits=LIMITS, audit_hook=False)
    assert result.stdout.startswith("ctypes loaded True"), result
    assert "ESCAPED" not in result.stdout and result.stdout.count("refused") == 5, result
    untouched(victim)


def test_a_caller_holding_over_a_thousand_descriptors_still_runs_programs() -> None:
    """The launcher server's socket keeps the caller's descriptor number, which ``select`` refuses from 1024
    on: a long-lived caller (a trainer, a test session) that opened many files must still reach the server."""
    caller = (
        "import os\nfrom rlcore_plugin_sandbox import SandboxLimits, run_python\n"
        "held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]\n"
        "print(run_python('print(6 * 7)', limits=SandboxLimits(wall_seconds=10)).stdout, end='')"
    )
    done = subprocess.run([sys.executable, "-c", caller], capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout) == (0, "42\n"), done.stderr
