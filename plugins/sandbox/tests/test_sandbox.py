"""The core sandbox against well-behaved programs and against what the audit hook names: each program is
contained and reported (the kernel's confinement without the hook: ``test_sandbox_hostile.py``)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path

import pytest
from rlcore_plugin_sandbox import SandboxLimits, host_isolation, run_python, run_python_async
from rlcore_plugin_sandbox.launch import SandboxInputError

LIMITS = SandboxLimits(cpu_seconds=1, wall_seconds=2, memory_mb=256, output_bytes=1000)


@pytest.fixture(autouse=True)
def accept_this_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the kernel cannot confine programs fully, accept it: what the hook names and the limits are
    the subject here (``test_sandbox_host.py`` tests the refusal)."""
    if host_isolation().level != "full":
        monkeypatch.setenv("RLCORE_SANDBOX_ALLOW_UNCONFINED", "1")


def test_a_program_reads_stdin_and_writes_stdout() -> None:
    result = run_python("import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))", stdin="1 2 3")
    assert (result.status, result.stdout, result.exit_code, result.truncated) == ("ok", "6\n", 0, False)


def test_a_program_may_write_inside_its_directory_and_it_is_removed_afterwards() -> None:
    result = run_python("import os\nopen('notes.txt', 'w').write('kept')\nprint(open('notes.txt').read(), os.getcwd())")
    assert result.status == "ok" and result.stdout.startswith("kept ")
    assert not Path(result.stdout.split()[1]).exists()


@pytest.mark.parametrize(
    "code, text",
    [("def f():\n    raise ValueError('bad input')\nf()", "ValueError: bad input"), ("def (", "SyntaxError")],
)
def test_a_failing_program_is_an_error_with_its_own_traceback(code: str, text: str) -> None:
    result = run_python(code, limits=LIMITS)
    assert result.status == "error" and result.exit_code == 1
    assert text in result.stderr and 'File "main.py"' in result.stderr and "_child" not in result.stderr


def test_a_non_zero_exit_is_an_error() -> None:
    result = run_python("import sys; sys.exit(3)", limits=LIMITS)
    assert (result.status, result.exit_code) == ("error", 3)


@pytest.mark.parametrize("code", ["while True: pass", "import time\ntime.sleep(60)"], ids=["busy", "sleeping"])
def test_a_program_that_runs_too_long_is_killed(code: str) -> None:
    result = run_python(code, limits=LIMITS)
    assert result.status == "timeout"
    assert result.wall_seconds < LIMITS.wall_seconds + 1.5


@pytest.mark.parametrize(
    "code",
    ["x = bytearray(2**30)", "chunks = []\nwhile True:\n    chunks.append(b'a' * 10**6)"],
    ids=["one", "growing"],
)
def test_a_memory_hog_hits_its_limit(code: str) -> None:
    result = run_python(code, limits=LIMITS)
    assert result.status == "memory" and "MemoryError" in result.stderr


def test_a_program_printing_10_mb_is_cut_and_does_not_block() -> None:
    result = run_python("import sys\nsys.stdout.write('x' * 10_000_000)\nsys.stderr.write('e' * 5000)", limits=LIMITS)
    assert result.status == "ok" and result.truncated and result.truncated_streams == ("stdout", "stderr")
    assert result.stdout.startswith("x" * 1000) and "9999000 more bytes cut" in result.stdout
    assert "4000 more bytes cut" in result.stderr


def test_an_oversized_file_fails_to_write() -> None:
    limits = SandboxLimits(cpu_seconds=1, wall_seconds=2, file_mb=1)
    result = run_python("open('big', 'wb').write(b'x' * (2 * 2**20))", limits=limits)
    assert result.status == "error" and "File too large" in result.stderr


@pytest.mark.parametrize(
    "code, refused",
    [
        ("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)", "socket"),
        ("import urllib.request\nurllib.request.urlopen('http://example.com', timeout=1)", "socket"),
        ("import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM)", "socket.__new__"),
        ("import os\nwhile True:\n    os.fork()", "os.fork"),
        ("import subprocess\nsubprocess.run(['ls'])", "_posixsubprocess"),
        ("import os\nos.system('echo hi')", "os.system"),
        ("import os\nos.posix_spawn('/bin/true', ['true'], {})", "os.posix_spawn"),
        ("import os\nos.kill(1, 9)", "os.kill"),
        ("import ctypes", "import ctypes"),
        ("import multiprocessing\nmultiprocessing.Process(target=print).start()", "_posixsubprocess"),
    ],
    ids=["connect", "urllib", "udp", "fork-bomb", "subprocess", "system", "spawn", "kill", "ctypes", "multiprocessing"],
)
def test_network_and_process_creation_are_blocked(code: str, refused: str) -> None:
    result = run_python(code, limits=LIMITS)
    assert result.status == "blocked", result
    assert any(refused in action for action in result.blocked), result.blocked


def test_writing_renaming_or_deleting_outside_its_directory_is_blocked(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    attempts = [
        f"open({str(tmp_path / 'new.txt')!r}, 'w').write('x')",
        f"open({str(victim)!r}, 'a').write('x')",
        f"import os\nos.close(os.open({str(tmp_path / 'raw')!r}, os.O_CREAT | os.O_WRONLY))",
        f"import os\nos.remove({str(victim)!r})",
        f"import os\nos.rename({str(victim)!r}, 'stolen')",
        f"import shutil\nshutil.rmtree({str(tmp_path)!r})",
        f"import os\nos.symlink({str(victim)!r}, 'link')\nopen('link', 'w').write('x')",
    ]
    for code in attempts:
        result = run_python(code, limits=LIMITS)
        assert result.status == "blocked" and "outside the working directory" in " ".join(result.blocked), code
    assert victim.read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.txt"]


def test_a_caught_refusal_still_reports_blocked() -> None:
    code = "try:\n    import socket\n    socket.socket()\nexcept PermissionError as error:\n    print('caught', error)"
    result = run_python(code, limits=LIMITS)
    assert result.status == "blocked" and result.stdout.startswith("caught sandbox:")


def test_the_program_sees_none_of_the_runs_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "secret")
    result = run_python("import os\nprint(sorted(os.environ))", limits=LIMITS)
    assert "WANDB_API_KEY" not in result.stdout


@pytest.mark.skipif(not os.path.exists("/proc/self/ns/net"), reason="no network namespaces on this OS")
def test_the_program_has_no_network_interface_where_namespaces_are_allowed() -> None:
    result = run_python("print(open('/proc/net/dev').read())", limits=LIMITS)
    if not result.network_namespace:
        pytest.skip("this kernel does not allow unprivileged user namespaces")
    interfaces = [line.split(":")[0].strip() for line in result.stdout.splitlines()[2:] if ":" in line]
    assert interfaces == ["lo"]


def test_async_runs_overlap_and_do_not_block_the_event_loop() -> None:
    """Three async runs overlap in time while the event loop keeps ticking. Their wall limit is generous: this is
    about overlap, not limits, and three sandboxed interpreters starting at once on a loaded 2-core machine can
    take longer than :data:`LIMITS`' 2 s."""
    code = "import time\nstart = time.monotonic()\ntime.sleep(0.5)\nprint(start, time.monotonic())"
    limits = dataclasses.replace(LIMITS, wall_seconds=60, cpu_seconds=10)

    async def main() -> list:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        task = asyncio.create_task(ticker())
        results = await asyncio.gather(*(run_python_async(code, limits=limits) for _ in range(3)))
        task.cancel()
        assert ticks > 0
        return results

    results = asyncio.run(main())
    assert all(r.stdout.strip() for r in results), [r.status for r in results]
    spans = [tuple(map(float, r.stdout.split())) for r in results]
    assert max(start for start, _ in spans) < min(end for _, end in spans)


@pytest.mark.parametrize("name", ["wall_seconds", "folder_mb", "max_processes"])
def test_limits_must_be_positive(name: str) -> None:
    with pytest.raises(ValueError, match=f"SandboxLimits.{name} must be positive"):
        SandboxLimits(**{name: 0})


def test_the_folder_holds_at_most_folder_mb() -> None:
    """A full tmpfs in the ``namespaces`` mode, the watchdog elsewhere (``test_sandbox_host.py``)."""
    limits = SandboxLimits(cpu_seconds=2, wall_seconds=4, file_mb=16, folder_mb=2)
    result = run_python("for i in range(3):\n    open(f'part{i}', 'wb').write(b'x' * 2**20)", limits=limits)
    full = "No space left on device" if host_isolation().mode == "namespaces" else "more than folder_mb=2]"
    assert result.status == "error" and full in result.stderr, result


def test_stdin_without_a_utf8_form_is_a_one_line_error() -> None:
    with pytest.raises(SandboxInputError) as refused:
        run_python("print(input())", stdin="ok \ud800", limits=LIMITS)
    assert isinstance(refused.value, ValueError)
    assert str(refused.value) == (
        "the program's stdin is not valid text: surrogates not allowed '\\ud800' at character 3 (it has no UTF-8 form)"
    )


def test_a_lone_surrogate_in_the_code_is_the_programs_syntax_error() -> None:
    result = run_python("print('\ud800')", limits=LIMITS)
    assert result.status == "error" and "SyntaxError: (unicode error) 'utf-8' codec can't decode" in result.stderr


def test_each_cut_stream_is_named() -> None:
    code = "import sys\nsys.stderr.write('e' * 5000)\nprint('fine')"
    result = run_python(code, limits=LIMITS)
    assert (result.status, result.stdout, result.truncated) == ("ok", "fine\n", True)
    assert result.truncated_streams == ("stderr",)
