"""The test kit's shared Ray (``warm_ray``): one local Ray per test process with warm workers, started again when a
module needs it after another stopped it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from rlcore_testkit.shared_ray import SHARED_RAY_CPUS  # noqa: E402

from rlcore.controller.placement import SESSION  # noqa: E402


def test_warm_ray_keeps_one_ray_with_warm_workers_and_stop_ends_both(shared_ray: Any, warm_ray: None) -> None:
    assert ray.is_initialized() and SESSION.warm
    node = ray.get_runtime_context().get_node_id()
    assert ray.cluster_resources()["CPU"] == SHARED_RAY_CPUS
    shared_ray.start()
    assert ray.get_runtime_context().get_node_id() == node, "a second start keeps the running Ray"
    shared_ray.stop()
    assert not ray.is_initialized() and not SESSION.warm and not SESSION.idle
    shared_ray.start()
    assert ray.is_initialized() and SESSION.warm and ray.get_runtime_context().get_node_id() != node


def test_a_module_that_does_not_use_the_shared_ray_finds_none_running(tmp_path: Path) -> None:
    """In a pytest run of two modules, the first using ``warm_ray`` and the second not, the second starts with the
    shared Ray stopped (the test kit's ``shared_ray_only_where_used``)."""
    (tmp_path / "test_a_uses_it.py").write_text(
        "import ray\n\n\ndef test_ray_runs(warm_ray):\n    assert ray.is_initialized()\n"
    )
    (tmp_path / "test_b_does_not.py").write_text(
        "import ray\n\n\ndef test_no_ray_runs():\n    assert not ray.is_initialized()\n"
    )
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", str(tmp_path)]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "2 passed" in result.stdout
