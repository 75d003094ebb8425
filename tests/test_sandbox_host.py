"""What the host offers the sandbox, and what happens where it offers less: detection, ``rlcore sandbox
check``, the refusal of code rewards and of the code tool (on this host through ``RLCORE_SANDBOX_ISOLATION``,
which runs the code path of a host without namespaces), the Landlock mode, the user-namespace variant, and
the run's plan line."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from rlcore.cli import cli
from rlcore.errors import RLCoreError
from rlcore.sandbox import SandboxLimits, SandboxUnavailableError, host_isolation, run_python
from rlcore.sandbox.check import setsid_sleeper, still_running
from rlcore.sandbox.host import BOUNDARY
from rlcore.sandbox.plan import export_unconfined_choice
from rlcore.testing import runs

LIMITS = SandboxLimits(cpu_seconds=2, wall_seconds=4, memory_mb=256)
full_host = pytest.mark.skipif(host_isolation().level != "full", reason="the sandbox is not fully confined here")


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
    from rlcore.reward.scorers.code import score

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

    from rlcore.agents.builtin_tools import CodeInterpreterTool

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
    assert host.level == "partial" and [row.name for row in host.missing()] == ["network"]
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
    script = (
        "from rlcore.sandbox import run_python\nr = run_python('print(6 * 7)')\nprint(r.status, r.stdout, r.isolation)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([venv / "bin" / "python", "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ok", "42", "namespaces"]


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1) to start an unprivileged process")
def test_an_unprivileged_user_gets_namespaces_of_its_own(targets, tmp_path: Path) -> None:
    """The path of a user who is not root: a process in a user namespace, without capabilities, runs the
    sandbox, which then maps only that user in a user namespace of its own (``variant user``). The outer
    namespace maps that user to root, so ``RLIMIT_NPROC`` is not checked here (the kernel exempts root)."""
    script = tmp_path / "unprivileged.py"
    script.write_text(
        "import json, sys\nfrom rlcore.sandbox import host_isolation, run_python, SandboxLimits\n"
        "host = host_isolation()\n"
        "result = run_python(sys.stdin.read(), limits=SandboxLimits(wall_seconds=4), audit_hook=False)\n"
        "print(json.dumps([host.info, host.level, host.unavailable, result.status, result.stdout]))\n"
    )
    command = ["unshare", "--user", "--map-user=1000", "--map-group=1000", sys.executable, str(script)]
    env = {key: value for key, value in os.environ.items() if not key.startswith("RLCORE_SANDBOX_")}
    done = subprocess.run(command, input=hostile(*targets), capture_output=True, text=True, timeout=120, env=env)
    if done.returncode != 0 and "unshare failed" in done.stderr:
        pytest.skip(f"no user namespaces for this user: {done.stderr.strip()}")
    info, level, unavailable, status, stdout = json.loads(done.stdout.splitlines()[-1])
    if "namespaces" in unavailable:
        pytest.skip(f"no nested user namespaces here: {unavailable['namespaces']}")
    assert (info["variant"], info["user"], info["uid"], level) == ("user", "caller", "1000", "full"), done.stdout
    assert (status, stdout) == ("ok", "[]\n")
    _, outside, _, marker = targets
    assert not os.listdir(outside) and not still_running(marker)


@full_host
def test_sandbox_check_verifies_each_confinement() -> None:
    result = CliRunner().invoke(cli, ["sandbox", "check", "--json", "--strict"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["level"] == "full" and report["contradictions"] == []
    verified = {row["name"]: row["verified"] for row in report["confinements"] if row["verified"] is not None}
    assert verified == dict.fromkeys(["reads", "writes", "processes", "process count", "network", "privileges"], True)


def test_sandbox_check_shows_what_a_host_without_isolation_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLCORE_SANDBOX_ISOLATION", "none")
    result = CliRunner().invoke(cli, ["sandbox", "check", "--strict"])
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


def test_the_run_passes_the_choice_to_its_scorer_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    from omegaconf import OmegaConf

    monkeypatch.delenv("RLCORE_SANDBOX_ALLOW_UNCONFINED", raising=False)
    export_unconfined_choice(OmegaConf.create({"reward_model": {"sandbox": {"allow_unconfined": False}}}))
    assert "RLCORE_SANDBOX_ALLOW_UNCONFINED" not in os.environ
    export_unconfined_choice(OmegaConf.create({"reward_model": {"sandbox": {"allow_unconfined": True}}}))
    assert os.environ["RLCORE_SANDBOX_ALLOW_UNCONFINED"] == "1"


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
