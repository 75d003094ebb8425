"""What the host offers the sandbox, and what happens where it offers less: detection, ``rlcore sandbox
check``, the refusal of code rewards and of the code tool (on this host through ``RLCORE_SANDBOX_ISOLATION``,
which runs the code path of a host without namespaces), the Landlock mode, the user-namespace variant, and
the run's plan line."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from rlcore_plugin_sandbox import SandboxLimits, SandboxUnavailableError, host_isolation, run_python
from rlcore_plugin_sandbox.check import setsid_sleeper, still_running
from rlcore_plugin_sandbox.host import BOUNDARY
from rlcore_plugin_sandbox.policy import ALLOW_ENV
from rlcore_testkit import runs

from rlcore import load_plugins
from rlcore.cli import cli
from rlcore.errors import RLCoreError

LIMITS = SandboxLimits(cpu_seconds=2, wall_seconds=4, memory_mb=256)
full_host = pytest.mark.skipif(host_isolation().level != "full", reason="the sandbox is not fully confined here")


@pytest.fixture(autouse=True)
def restore_allow_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start without ``RLCORE_SANDBOX_ALLOW_UNCONFINED`` and put it back as it was after each test: a run (dry or
    not) with ``reward_model.sandbox.allow_unconfined=true`` sets it in this process (the plugin's
    ``on_config_resolved`` hook)."""
    monkeypatch.setenv(ALLOW_ENV, "0")
    monkeypatch.delenv(ALLOW_ENV)


def sandbox_check(*args: str):
    """``rlcore sandbox check ARGS`` in this process, on the command line the plugins extend (as the ``rlcore``
    entry point does)."""
    load_plugins().add_commands(cli)
    return CliRunner().invoke(cli, ["sandbox", "check", *args])


def hostile(secret: Path, outside: Path, port: int, marker: str) -> str:
    """A program that reads ``secret``, writes in ``outside``, connects to ``port`` on 127.0.0.1 and leaves a
    ``setsid`` process (command line ``sleep MARKER``) behind; it prints what got through."""
    return f"""
import os, socket
got = []
try:
    got.append("read " + open({str(secret)!r}).read())
except OSError:
    pass
try:
    open({str(outside / "new.txt")!r}, "w").write("x")
    got.append("wrote")
except OSError:
    pass
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=1)
    got.append("connected")
except OSError:
    pass
print(got)
""" + setsid_sleeper(marker)


@pytest.fixture
def targets(tmp_path: Path):
    """A secret anyone may read, a folder anyone may write, a TCP listener on 127.0.0.1 and a marker."""
    tmp_path.chmod(0o755)
    secret = tmp_path / "secret.txt"
    secret.write_text("token")
    secret.chmod(0o644)
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o777)
    outside.chmod(0o777)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        yield secret, outside, listener.getsockname()[1], f"{uuid.uuid4().int % 10**9}.125"


@full_host
def test_this_host_confines_every_boundary() -> None:
    host = host_isolation()
    rows = {row.name: row for row in host.confinements()}
    assert host.mode == "namespaces" and host.level == "full"
    assert all(rows[name].enforced for name in BOUNDARY), rows


def test_an_unknown_isolation_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLCORE_SANDBOX_ISOLATION", "chroot")
    with pytest.raises(RLCoreError, match="RLCORE_SANDBOX_ISOLATION='chroot': expected one of auto, landlock, none"):
        host_isolation()


def test_without_kernel_isolation_the_sandbox_refuses_unless_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLCORE_SANDBOX_ISOLATION", "none")
    monkeypatch.delenv("RLCORE_SANDBOX_ALLOW_UNCONFINED", raising=False)
    assert host_isolation().level == "none"
    with pytest.raises(SandboxUnavailableError) as refused:
        run_python("print(1)", limits=LIMITS)
    message = str(refused.value)
    assert "level none; not enforced: reads" in message and "namespaces: RLCORE_SANDBOX_ISOLATION=none" in message
    assert "reward_model.sandbox.allow_unconfined=true" in message and "allow_unconfined: true" in message
    accepted = run_python("print(1)", limits=LIMITS, allow_unconfined=True)
    assert (accepted.status, accepted.stdout, accepted.isolation) == ("ok", "1\n", "none")
    monkeypatch.setenv("RLCORE_SANDBOX_ALLOW_UNCONFINED", "1")
    assert run_python("print(2)", limits=LIMITS).stdout == "2\n"
    with pytest.raises(SandboxUnavailableError):  # an explicit False is not overridden by the variable
        run_python("print(3)", limits=LIMITS, allow_unconfined=False)


def test_code_rewards_refuse_a_host_without_isolation(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlcore_plugin_sandbox.scorer import score

    tests = json.dumps({"inputs": ["2 3\n"], "outputs": ["5\n"]})
    program = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    monkeypatch.setenv("RLCORE_SANDBOX_ISOLATION", "none")
    monkeypatch.delenv("RLCORE_SANDBOX_ALLOW_UNCONFINED", raising=False)
    with pytest.raises(SandboxUnavailableError, match="cannot fully confine"):
        score("codecontests", program, tests)
    monkeypatch.setenv("RLCORE_SANDBOX_ALLOW_UNCONFINED", "1")
    assert score("codecontests", program, tests)["score"] == 1.0


def test_the_code_tool_refuses_a_host_without_isolation(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from rlcore_plugin_sandbox.tool import CodeInterpreterTool

    monkeypatch.setenv("RLCORE_SANDBOX_ISOLATION", "none")
    monkeypatch.setenv("RLCORE_SANDBOX_ALLOW_UNCONFINED", "1")  # the tool's own key decides, not the reward's
    with pytest.raises(RLCoreError, match="code_interpreter: the sandbox cannot fully confine"):
        CodeInterpreterTool({"wall_seconds": 4})
    with pytest.raises(RLCoreError, match="allow_unconfined must be true or false, got 'yes'"):
        CodeInterpreterTool({"allow_unconfined": "yes"})
    tool = CodeInterpreterTool({"wall_seconds": 4, "allow_unconfined": True})
    assert asyncio.run(tool.execute("t", {"code": "print(6 * 7)"})).text == "42\n"


def test_landlock_confines_reads_writes_tcp_and_processes(monkeypatch: pytest.MonkeyPatch, targets) -> None:
    monkeypatch.setenv("RLCORE_SANDBOX_ISOLATION", "landlock")
    host = host_isolation()
    if host.mode != "landlock":
        pytest.skip(f"no Landlock here: {host.unavailable.get('landlock')}")
    owns_files = host.info["user"] != "own"  # the caller's user, or uid 0: it owns files of the host
    assert host.level == "partial" and [row.name for row in host.missing()] == ["writes"] * owns_files + ["network"]
    secret, outside, port, marker = targets
    result = run_python(hostile(*targets), limits=LIMITS, allow_unconfined=True, audit_hook=False)
    assert (result.status, result.stdout, result.isolation) == ("ok", "[]\n", "landlock"), result
    assert not os.listdir(outside) and not still_running(marker)


@full_host
def test_an_interpreter_under_tmp_is_visible_in_the_sandbox(tmp_path: Path) -> None:
    """Run from a virtual environment under ``/tmp`` (a checkout there): the environment's prefix is bound
    read-only inside the program's private ``/tmp``, and the program runs."""
    assert str(tmp_path).startswith("/tmp/")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    script = "from rlcore_plugin_sandbox import run_python\nr = run_python('print(6 * 7)')\nprint(r.status, r.stdout, r.isolation)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([venv / "bin" / "python", "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ok", "42", "namespaces"]


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1) to start an unprivileged process")
def test_an_unprivileged_user_gets_namespaces_of_its_own(targets, tmp_path: Path) -> None:
    """The path of a user who is not root: a process in a user namespace, without capabilities, runs the
    sandbox, which then maps only that user in a user namespace of its own (``variant user``). The outer
    namespace maps that user to root, so ``RLIMIT_NPROC`` is not checked here (the kernel exempts root).

    Such a user has no cgroup of its own (none is delegated here): ``RLIMIT_AS`` does not count the kernel's
    pipe and socket buffers, and a program with ``memory_mb=64`` fills them with twice that. The host says
    so: memory is not enforced, and the level is ``partial``."""
    script = tmp_path / "unprivileged.py"
    script.write_text(
        "import json, sys\nfrom rlcore_plugin_sandbox import host_isolation, run_python, SandboxLimits\n"
        "from rlcore_plugin_sandbox.check import kernel_buffer_hog\n"
        "host = host_isolation()\n"
        "rows = {row.name: row.enforced for row in host.confinements()}\n"
        "run = lambda code, limits: run_python(code, limits=limits, audit_hook=False, allow_unconfined=True)\n"
        "result = run(sys.stdin.read(), SandboxLimits(wall_seconds=4))\n"
        "hog = run(kernel_buffer_hog(128), SandboxLimits(wall_seconds=4, memory_mb=64))\n"
        "print(json.dumps([host.info, host.level, host.unavailable, host.cgroups is None, rows['memory'],\n"
        "                  result.status, result.stdout, hog.status, hog.stdout]))\n"
    )
    command = ["unshare", "--user", "--map-user=1000", "--map-group=1000", sys.executable, str(script)]
    env = {key: value for key, value in os.environ.items() if not key.startswith("RLCORE_SANDBOX_")}
    done = subprocess.run(command, input=hostile(*targets), capture_output=True, text=True, timeout=120, env=env)
    if done.returncode != 0 and "unshare failed" in done.stderr:
        pytest.skip(f"no user namespaces for this user: {done.stderr.strip()}")
    info, level, unavailable, no_cgroup, memory, status, stdout, hog_status, held = json.loads(
        done.stdout.splitlines()[-1]
    )
    if "namespaces" in unavailable:
        pytest.skip(f"no nested user namespaces here: {unavailable['namespaces']}")
    assert (info["variant"], info["user"], info["uid"]) == ("user", "caller", "1000"), done.stdout
    assert (status, stdout) == ("ok", "[]\n")
    _, outside, _, marker = targets
    assert not os.listdir(outside) and not still_running(marker)
    if no_cgroup:  # the common case of a user without a delegated cgroup
        assert int(held) >= 128, (hog_status, held)  # 128 MB of kernel buffers with memory_mb=64 ...
        assert (memory, level) == (False, "partial")  # ... and the host does not claim otherwise
    else:
        assert (memory, level, hog_status, held) == (True, "full", "memory", "")


@full_host
def test_sandbox_check_verifies_each_confinement() -> None:
    result = sandbox_check("--json", "--strict")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["level"] == "full" and report["contradictions"] == []
    verified = {row["name"]: row["verified"] for row in report["confinements"] if row["verified"] is not None}
    names = ["reads", "writes", "folder size", "processes", "process count", "memory", "network", "privileges"]
    assert verified == dict.fromkeys(names, True)


def test_sandbox_check_shows_what_a_host_without_isolation_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLCORE_SANDBOX_ISOLATION", "none")
    result = sandbox_check("--strict")
    assert result.exit_code == 1
    lines = {line.split()[0]: line.split()[1:3] for line in result.output.splitlines()[1:5]}
    assert lines["reads"] == ["no", "no"] and lines["writes"] == ["no", "no"]
    assert "level: none (mode none; RLCORE_SANDBOX_ISOLATION=none)" in result.output


@pytest.fixture
def code_task(tmp_path: Path) -> Path:
    """A parquet file of one code problem (data_source codecontests)."""
    row = {
        "data_source": "codecontests",
        "prompt": [{"role": "user", "content": "Add two numbers."}],
        "reward_model": {"style": "rule", "ground_truth": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})},
    }
    path = tmp_path / "code.parquet"
    pq.write_table(pa.Table.from_pylist([row]), path)
    return path


@full_host
def test_the_plan_names_the_sandbox_of_code_rewards(code_task: Path) -> None:
    result = runs.dry_run(f"data.train_files={code_task}", "actor_rollout_ref.model.path=m")
    assert result.exit_code == 0, result.output
    assert "sandbox: full (namespaces) for code rewards (codecontests)" in result.output


def test_the_dry_run_refuses_code_rewards_on_a_host_without_isolation(
    code_task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLCORE_SANDBOX_ISOLATION", "none")
    result = runs.dry_run(f"data.train_files={code_task}", "actor_rollout_ref.model.path=m")
    assert result.exit_code != 0
    assert "code rewards (codecontests): the sandbox cannot fully confine model-written code" in result.output
    accepted = runs.dry_run(
        f"data.train_files={code_task}", "actor_rollout_ref.model.path=m", "reward_model.sandbox.allow_unconfined=true"
    )
    assert accepted.exit_code == 0, accepted.output
    assert "the weaker confinement is accepted by reward_model.sandbox.allow_unconfined=true" in accepted.output


def test_the_run_passes_the_choice_to_its_scorer_processes() -> None:
    """The plugin's ``on_config_resolved`` hook (run in the controller before any worker or scorer process
    starts) hands ``reward_model.sandbox.allow_unconfined=true`` on as ``RLCORE_SANDBOX_ALLOW_UNCONFINED=1``."""
    from rlcore.config import load_config

    hook = load_plugins().hook
    hook.on_config_resolved(config=load_config(overrides=["reward_model.sandbox.allow_unconfined=false"]))
    assert ALLOW_ENV not in os.environ
    hook.on_config_resolved(config=load_config(overrides=["reward_model.sandbox.allow_unconfined=true"]))
    assert os.environ[ALLOW_ENV] == "1"


@pytest.mark.parametrize("accepted", [False, True])
def test_the_plan_and_the_code_tool_on_a_host_without_isolation(
    tmp_path: Path, code_task: Path, monkeypatch: pytest.MonkeyPatch, accepted: bool
) -> None:
    monkeypatch.setenv("RLCORE_SANDBOX_ISOLATION", "none")
    tools = tmp_path / "tools.yaml"
    tools.write_text(
        f"tools:\n  - class_name: code_interpreter\n    config: {{allow_unconfined: {str(accepted).lower()}}}\n"
    )
    result = runs.dry_run(
        f"data.train_files={code_task}",
        "actor_rollout_ref.model.path=m",
        "reward_model.sandbox.allow_unconfined=true",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
    )
    if accepted:
        assert result.exit_code == 0, result.output
        assert "for code rewards (codecontests) and tool code_interpreter" in result.output
        assert (
            "accepted by reward_model.sandbox.allow_unconfined=true, code_interpreter: allow_unconfined"
            in result.output
        )
    else:
        assert result.exit_code != 0
        assert "tools[0]: code_interpreter: the sandbox cannot fully confine" in result.output


def test_landlock_says_which_writes_it_does_not_cover(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Landlock does not cover chmod, chown, utime or extended attributes: a program whose user owns files of
    the host (uid 0 here, or an unprivileged caller's own user) changes those of a file outside its folder,
    and the host says that writes are not enforced. With the hook, each of them is refused, by path and by
    descriptor."""
    monkeypatch.setenv("RLCORE_SANDBOX_ISOLATION", "landlock")
    host = host_isolation()
    if host.mode != "landlock":
        pytest.skip(f"no Landlock here: {host.unavailable.get('landlock')}")
    tmp_path.chmod(0o755)
    owned = tmp_path / "owned.txt"  # a file of this process's user, outside the program's folder
    owned.write_text("x")
    owned.chmod(0o644)
    attempts = [
        f"os.chmod({str(owned)!r}, 0o666)",
        f"os.utime({str(owned)!r}, (0, 0))",
        f"os.setxattr({str(owned)!r}, 'user.rlcore', b'1')",
        f"os.fchmod(os.open({str(owned)!r}, os.O_PATH), 0o666)",
    ]
    code = "import os\n" + "".join(
        f"try:\n    {attempt}\n    print('changed')\nexcept OSError:\n    print('refused')\n" for attempt in attempts
    )
    row = {row.name: row for row in host.confinements()}["writes"]
    kernel_only = run_python(code, limits=LIMITS, allow_unconfined=True, audit_hook=False)
    assert kernel_only.status == "ok", kernel_only
    changed = stat.S_IMODE(owned.stat().st_mode) != 0o644
    assert changed == (host.info["user"] != "own") and row.enforced == (not changed), (row, kernel_only.stdout)
    if not row.enforced:
        assert "chmod, chown, utime and extended attributes" in row.how and f"uid {host.info['uid']}" in row.how
    owned.chmod(0o644)
    hooked = run_python(code, limits=LIMITS, allow_unconfined=True)
    assert hooked.status == "blocked" and hooked.stdout.split() == ["refused"] * len(attempts), hooked
    assert stat.S_IMODE(owned.stat().st_mode) == 0o644


@pytest.mark.parametrize("isolation", ["landlock", "none"])
@pytest.mark.parametrize(
    "code",
    [
        "for part in range(40):\n    open(f'part{part}', 'wb').write(b'x' * 2**20)",
        "import os\nfd = os.open('.', os.O_TMPFILE | os.O_WRONLY)\nfor _ in range(8):\n    os.write(fd, b'x' * 2**20)",
        "import os\nfd = os.open('gone', os.O_CREAT | os.O_WRONLY)\nos.remove('gone')\n"
        "for _ in range(8):\n    os.write(fd, b'x' * 2**20)",
    ],
    ids=["40-files", "unnamed", "deleted"],
)
def test_where_no_tmpfs_holds_the_folder_a_watchdog_stops_it(
    monkeypatch: pytest.MonkeyPatch, isolation: str, code: str
) -> None:
    """Without a mount namespace the folder is on the host's disk: 40 MB in files of 1 MB, or 8 MB in a file
    without a name, with ``folder_mb=4``. The watchdog stops the program (at the latest in the second it then
    sleeps) and the result says why."""
    monkeypatch.setenv("RLCORE_SANDBOX_ISOLATION", isolation)
    if host_isolation().mode != isolation:
        pytest.skip(f"no {isolation} mode here: {host_isolation().unavailable.get(isolation)}")
    limits = SandboxLimits(cpu_seconds=2, wall_seconds=4, file_mb=16, folder_mb=4)
    result = run_python(code + "\nimport time\ntime.sleep(1)\nprint('kept it')", limits=limits, allow_unconfined=True)
    assert (result.status, result.stdout) == ("error", ""), result
    assert "more than folder_mb=4]" in result.stderr.splitlines()[-1], result


def test_the_hook_alone_refuses_what_raises_no_audit_event(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """At level ``none`` the hook is all there is. CPython raises no audit event for ``mkfifo``, ``mknod``,
    ``pidfd_open`` or ``pidfd_send_signal`` (which also takes a ``/proc/PID`` folder), nor when a fresh
    ``posix`` module is made; ``F_SETOWN`` sends SIGIO and ``prlimit`` sets CPU limits of other processes; an
    extension module copied into the folder is native code. Each is refused: nothing appears outside and a
    process of the host lives on."""
    monkeypatch.setenv("RLCORE_SANDBOX_ISOLATION", "none")
    tmp_path.chmod(0o777)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    attempts = {
        "mkfifo": "os.mkfifo(outside + '/fifo')",
        "mknod": "os.mknod(outside + '/node')",
        "pidfd": "signal.pidfd_send_signal(os.pidfd_open(pid), signal.SIGKILL)",
        "proc": "signal.pidfd_send_signal(os.open(f'/proc/{pid}', os.O_RDONLY), signal.SIGKILL)",
        "posix": "util.module_from_spec(machinery.ModuleSpec('posix', machinery.BuiltinImporter)).mknod(outside + '/p')",
        "sigio": "fcntl.fcntl(reader, fcntl.F_SETOWN, pid)\n"
        "    fcntl.fcntl(reader, fcntl.F_SETFL, os.O_ASYNC)\n    os.write(writer, b'x')",
        "prlimit": "resource.prlimit(pid, resource.RLIMIT_CPU, (0, 0))",
        "native": "shutil.copy(math.__file__, os.path.basename(math.__file__))\n"
        "    sys.path.insert(0, os.getcwd())\n    del sys.modules['math']\n    import math as native",
    }
    code = (
        "import fcntl, math, os, resource, shutil, signal, sys\nfrom importlib import machinery, util\n"
        f"outside, pid = {str(tmp_path)!r}, {sleeper.pid}\nreader, writer = os.pipe()\n"
    ) + "".join(
        f"try:\n    {attempt}\n    print('ESCAPED {name}')\nexcept OSError:\n    print('refused')\n"
        for name, attempt in attempts.items()
    )
    try:
        result = run_python(code, limits=LIMITS, allow_unconfined=True)
        time.sleep(0.2)  # a signal sent has arrived
        assert sleeper.poll() is None, result
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.status == "blocked" and result.stdout.split() == ["refused"] * len(attempts), result
    assert not os.listdir(tmp_path)
    assert len(result.blocked) == len(attempts), result.blocked


@full_host
@pytest.mark.parametrize("interpreter", ["this", "a-venv-under-tmp"])
def test_a_tmpdir_under_dev_keeps_the_namespaces(interpreter: str, tmp_path: Path, make_venv) -> None:
    """``TMPDIR=/dev/shm/...`` (the folders are made there): the program's folder goes inside the new ``/dev``,
    and the host keeps its level — also when the run's interpreter lives under ``/tmp`` (a CI checkout there),
    which the program's ``/tmp`` then shows inside its folder."""
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm here")
    if interpreter == "this":
        python = sys.executable
    else:
        assert str(tmp_path).startswith("/tmp/"), "pytest's temporary folders are under /tmp here"
        python = str(make_venv(tmp_path / "venv").python)
    script = (
        "from rlcore_plugin_sandbox import host_isolation, run_python\n"
        "result = run_python(\"open('x', 'w').write('42')\\nprint(open('/tmp/x').read())\")\n"
        "print(host_isolation().summary(), result.status, result.stdout)\n"
    )
    tmpdir = tempfile.mkdtemp(dir="/dev/shm", prefix="rlcore-test-")
    try:
        env = {key: value for key, value in os.environ.items() if not key.startswith("RLCORE_SANDBOX_")}
        done = subprocess.run(
            [python, "-c", script], capture_output=True, text=True, timeout=120, env={**env, "TMPDIR": tmpdir}
        )
        assert not os.listdir(tmpdir)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    assert done.stdout.split() == ["full", "(namespaces)", "ok", "42"], done.stdout + done.stderr[-2000:]
    assert "confines programs less" not in done.stderr


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1) to make a user namespace")
def test_a_fallback_names_its_cause(code_task: Path, tmp_path: Path) -> None:
    """As root of a user namespace that maps only that user (a rootless container), the ``namespaces`` mode
    cannot give the program a user of its own and the sandbox falls back to Landlock: a warning, the plan's
    sandbox line and ``rlcore sandbox check`` each name the cause, with the program's folder and TMPDIR."""
    script = tmp_path / "fallback.py"
    script.write_text(
        "import sys\nfrom click.testing import CliRunner\nfrom rlcore import load_plugins\nfrom rlcore.cli import cli\n"
        "from rlcore_testkit import runs\nload_plugins().add_commands(cli)\n"
        f"plan = runs.dry_run('data.train_files={code_task}', 'actor_rollout_ref.model.path=m',\n"
        "                     'reward_model.sandbox.allow_unconfined=true')\n"
        "print(plan.output)\nprint(CliRunner().invoke(cli, ['sandbox', 'check']).output)\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("RLCORE_SANDBOX_")}
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    if done.returncode != 0 and "unshare failed" in done.stderr:
        pytest.skip(f"no user namespaces here: {done.stderr.strip()}")
    lines = done.stdout.splitlines()
    if "level: full (mode namespaces; RLCORE_SANDBOX_ISOLATION=auto)" in lines:
        pytest.skip("the namespaces mode works for root of a user namespace here: no fallback to name")
    (plan,) = [line for line in lines if line.startswith("sandbox: partial (Landlock")]
    (check,) = [line for line in lines if line.startswith("not used: namespaces: ")]
    cause = "the sandbox (namespaces) failed"
    assert f"; namespaces failed: {cause}" in plan and "TMPDIR" in plan, plan
    assert cause in check and "(the program's folder was /" in check and "TMPDIR" in check, check
    warning = f"sandbox: landlock confines programs less than it could: namespaces failed: {cause}"
    assert warning in done.stdout + done.stderr, done.stderr[-3000:]


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1) to start an unprivileged process")
def test_a_folder_the_watchdog_cannot_read_counts_as_full(tmp_path: Path) -> None:
    """An unprivileged caller's program runs as that user under Landlock, and may hide a folder from the
    launcher (``chmod 0``): what the watchdog cannot measure counts as past ``folder_mb``."""
    script = tmp_path / "hidden.py"
    script.write_text(
        "import json\nfrom rlcore_plugin_sandbox import host_isolation, run_python\n"
        "code = \"import os, time\\nos.mkdir('hidden')\\nos.chmod('hidden', 0)\\ntime.sleep(1)\\nprint('kept it')\"\n"
        "result = run_python(code, allow_unconfined=True)\n"
        "print(json.dumps([host_isolation().mode, host_isolation().info['user'], result.status, result.stdout,"
        " result.stderr]))\n"
    )
    command = ["unshare", "--user", "--map-user=1000", "--map-group=1000", sys.executable, str(script)]
    env = {key: value for key, value in os.environ.items() if not key.startswith("RLCORE_SANDBOX_")}
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=120, env={**env, "RLCORE_SANDBOX_ISOLATION": "landlock"}
    )
    if done.returncode != 0 and "unshare failed" in done.stderr:
        pytest.skip(f"no user namespaces for this user: {done.stderr.strip()}")
    mode, user, status, stdout, stderr = json.loads(done.stdout.splitlines()[-1])
    if mode != "landlock":
        pytest.skip(f"no Landlock here (mode {mode})")
    assert (user, status, stdout) == ("caller", "error", ""), stderr
    assert stderr.endswith("[sandbox: its folder could not be measured (a folder unreadable), more than folder_mb=64]")
