"""A core without rlcore-plugin-tasks and rlcore-plugin-sft (a venv that hides both distributions): the default
run, ``rlcore sft`` and ``rlcore data arith-sft`` each fail naming the distribution to install."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def lean(tmp_path_factory: pytest.TempPathFactory, make_venv: Any) -> Any:
    """This environment without the two distributions."""
    return make_venv(tmp_path_factory.mktemp("lean") / "venv", hidden=("rlcore-plugin-tasks", "rlcore-plugin-sft"))


def test_the_default_run_names_the_tasks_distribution(lean: Any, run: Any, tmp_path: Path) -> None:
    result = run([lean.python, "-m", "rlcore", "run", "--dry-run"], cwd=tmp_path, check=False)
    assert result.returncode == 2, result.stderr
    assert (
        "error: unknown preset 'arith-cpu': it is provided by rlcore-plugin-tasks, which is not installed: "
        "pip install rlcore-plugin-tasks." in result.stderr
    ), result.stderr
    assert not list(tmp_path.iterdir()), "nothing is written"


@pytest.mark.parametrize("command", [("sft",), ("sft", "--dry-run"), ("data", "arith-sft")], ids=" ".join)
def test_the_sft_commands_name_the_sft_distribution(
    lean: Any, run: Any, tmp_path: Path, command: tuple[str, ...]
) -> None:
    result = run([lean.python, "-m", "rlcore", *command], cwd=tmp_path, check=False)
    path = " ".join(command[: 2 if command[0] == "data" else 1])
    assert result.returncode == 2, result.stderr
    assert (
        f"Error: No such command {path.split()[-1]!r}: `rlcore {path}` is added by rlcore-plugin-sft, which is not "
        "installed: pip install rlcore-plugin-sft." in result.stderr
    ), result.stderr
