"""``rlcore_testkit.ranks``: ranks forked from the preloaded fork server get what ``torch.multiprocessing.spawn``
gives its ranks (the parent's current environment, ``sys.path``, working directory and standard output and
error; a failing rank's traceback), from a server that imported the heavy modules once and started no threads."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rlcore_testkit.ranks import BASE_PRELOAD, ensure_server, spawn
from torch.multiprocessing import ProcessRaisedException

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads threads from /proc")


@pytest.fixture(scope="module")
def jobs() -> Iterator[Any]:
    """The :mod:`ranks_jobs` module, importable by name in the ranks."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(Path(__file__).parent))
        import ranks_jobs

        yield ranks_jobs
        sys.modules.pop("ranks_jobs", None)


@pytest.fixture(scope="module")
def torch_threads() -> int:
    """The threads of a fresh interpreter that imported torch (and hence numpy's BLAS threads)."""
    code = "import os, torch; print(len(os.listdir('/proc/self/task')))"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def test_ranks_fork_from_one_preloaded_server_without_threads(jobs: Any, tmp_path: Path, torch_threads: int) -> None:
    """Both ranks are children of one server (not of this process) that imported torch, transformers' model
    code, rlcore's workers and the backends' modules, and has no more threads than importing torch starts
    (no OpenMP pool: it ran no parallel op before forking)."""
    spawn(jobs.report, args=(str(tmp_path),), nprocs=2)
    records = jobs.read_reports(str(tmp_path), 2)
    modules = ensure_server()
    assert records[0]["server"] == records[1]["server"] != os.getpid()
    assert records[0]["pid"] != records[1]["pid"]
    for record in records:
        assert record["preloaded"] == [name for name in jobs.PROBED if name in modules]
        assert {"torch", "transformers.modeling_utils", "rlcore.workers.actor"} <= set(record["preloaded"])
        assert record["cwd"] == os.getcwd()
        assert record["server_threads"] <= torch_threads
    assert set(BASE_PRELOAD) <= set(modules)


def test_ranks_get_the_parents_current_environment(jobs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A variable set before one spawn and removed before the next is seen by the first ranks only, one set
    in between by the second only, whichever environment the server started with."""
    monkeypatch.setenv("TESTKIT_RANKS_BEFORE", "before")
    monkeypatch.delenv("TESTKIT_RANKS_AFTER", raising=False)
    spawn(jobs.report, args=(str(tmp_path),), nprocs=1)
    first = jobs.read_reports(str(tmp_path), 1)[0]
    monkeypatch.delenv("TESTKIT_RANKS_BEFORE")
    monkeypatch.setenv("TESTKIT_RANKS_AFTER", "after")
    spawn(jobs.report, args=(str(tmp_path),), nprocs=1)
    second = jobs.read_reports(str(tmp_path), 1)[0]
    assert first["server"] == second["server"]
    assert first["environment"] == {"TESTKIT_RANKS_BEFORE": "before", "TESTKIT_RANKS_AFTER": None}
    assert second["environment"] == {"TESTKIT_RANKS_BEFORE": None, "TESTKIT_RANKS_AFTER": "after"}


def test_ranks_import_by_name_from_the_parents_current_sys_path(
    jobs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module on a folder this process put on ``sys.path`` after the server started is importable in the
    ranks (how the Megatron tests' ``multirank_jobs`` reaches them)."""
    spawn(jobs.report, args=(str(tmp_path),), nprocs=1)  # the server runs from here on
    folder = tmp_path / "late"
    folder.mkdir()
    (folder / "late_rank_jobs.py").write_text(
        "from pathlib import Path\n\n\ndef touch(rank, out):\n    Path(out, f'late{rank}').touch()\n"
    )
    monkeypatch.syspath_prepend(str(folder))
    late = importlib.import_module("late_rank_jobs")
    try:
        spawn(late.touch, args=(str(tmp_path),), nprocs=2)
    finally:
        monkeypatch.delitem(sys.modules, "late_rank_jobs")
    assert (tmp_path / "late0").exists() and (tmp_path / "late1").exists()


def test_a_rank_that_raises_fails_the_call_with_its_traceback(jobs: Any) -> None:
    with pytest.raises(ProcessRaisedException) as failure:
        spawn(jobs.fail_on_rank_one, nprocs=2)
    assert failure.value.error_index == 1
    assert "rank 1 cannot go on" in str(failure.value) and "fail_on_rank_one" in str(failure.value)


def test_rank_output_reaches_the_running_tests_capture(jobs: Any, capfd: pytest.CaptureFixture[str]) -> None:
    """The ranks write to this process's standard output and error as they are now (pytest's capture of this
    test), not to the ones the server started with."""
    with capfd.disabled():
        spawn(jobs.fail_on_rank_one, nprocs=1)  # the server runs from here on, started outside the capture
    spawn(jobs.say_hello, nprocs=2)
    out, err = capfd.readouterr()
    assert "hello from rank 0" in out and "hello from rank 1" in out
    assert "warning from rank 1" in err


def test_preload_restarts_the_server_once_with_more_modules(jobs: Any, tmp_path: Path) -> None:
    """A spawn that needs a module the server did not import restarts it with that module as well; later
    spawns, with or without asking for it, keep that server."""
    restarts = "tabnanny" not in ensure_server()
    servers = []
    for step, preload in enumerate([(), ("tabnanny",), ("tabnanny",), ()]):
        out = tmp_path / str(step)
        out.mkdir()
        spawn(jobs.report, args=(str(out),), nprocs=1, preload=preload)
        record = jobs.read_reports(str(out), 1)[0]
        servers.append(record["server"])
        assert ("tabnanny" in record["preloaded"]) == (step > 0 or not restarts), step
    assert (servers[0] != servers[1]) == restarts
    assert servers[1] == servers[2] == servers[3]
