"""A core without rlcore-plugin-tasks, rlcore-plugin-sft, rlcore-plugin-judge, rlcore-plugin-profiler and
rlcore-plugin-agents (a venv that hides the five distributions): the default run, ``rlcore sft``, ``rlcore data
arith-sft``, ``rlcore data gsm8k`` / ``geo3k``, ``reward_model.reward_manager=judge``, the profiler's keys and
multi-turn each fail naming the distribution to install."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def lean(tmp_path_factory: pytest.TempPathFactory, make_venv: Any) -> Any:
    """This environment without the five distributions."""
    hidden = (
        *("rlcore-plugin-tasks", "rlcore-plugin-sft", "rlcore-plugin-judge"),
        *("rlcore-plugin-profiler", "rlcore-plugin-agents"),
    )
    return make_venv(tmp_path_factory.mktemp("lean") / "venv", hidden=hidden)


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


@pytest.mark.parametrize("command", [("data", "gsm8k"), ("data", "geo3k", "--input", ".")], ids=" ".join)
def test_the_verl_data_commands_name_the_tasks_distribution(
    lean: Any, run: Any, tmp_path: Path, command: tuple[str, ...]
) -> None:
    result = run([lean.python, "-m", "rlcore", *command], cwd=tmp_path, check=False)
    assert result.returncode == 2, result.stderr
    assert (
        f"Error: No such command {command[1]!r}: `rlcore data {command[1]}` is added by rlcore-plugin-tasks, which is "
        "not installed: pip install rlcore-plugin-tasks." in result.stderr
    ), result.stderr
    assert not list(tmp_path.iterdir()), "nothing is written"


def test_the_judge_reward_manager_names_the_judge_distribution_before_the_run_starts(
    lean: Any, run: Any, tmp_path: Path
) -> None:
    args = ["data.train_files=x.parquet", "actor_rollout_ref.model.path=m", "reward_model.reward_manager=judge"]
    for dry_run in (["--dry-run"], []):
        result = run([lean.python, "-m", "rlcore", "run", *dry_run, *args], cwd=tmp_path, check=False)
        assert result.returncode == 2, result.stderr
        assert (
            "error: reward_model.reward_manager=judge: unknown reward_manager 'judge': it is provided by "
            "rlcore-plugin-judge, which is not installed: pip install rlcore-plugin-judge." in result.stderr
        ), result.stderr
        assert not list(tmp_path.iterdir()), "nothing is written: the run did not start"


@pytest.mark.parametrize("key", ["global_profiler.tool=torch", "actor_rollout_ref.actor.profiler.enable=true"])
def test_a_key_of_the_profiler_names_the_profiler_distribution_before_the_run_starts(
    lean: Any, run: Any, tmp_path: Path, key: str
) -> None:
    """A verl key that rlcore-plugin-profiler declares is never silently ignored: one line naming the key and
    the ``pip install`` line, before anything is written."""
    args = ["data.train_files=x.parquet", "actor_rollout_ref.model.path=m", key]
    result = run([lean.python, "-m", "rlcore", "run", "--dry-run", *args], cwd=tmp_path, check=False)
    assert result.returncode == 2, result.stderr
    name = key.split("=")[0]
    assert (
        f"error: command line: config key {name!r} is a key of rlcore-plugin-profiler, which is not installed: "
        "pip install rlcore-plugin-profiler\n" in result.stderr
    ), result.stderr
    assert "Traceback" not in result.stderr and "unknown config key" not in result.stderr
    assert not list(tmp_path.iterdir()), "nothing is written"


@pytest.mark.parametrize(
    "key", ["actor_rollout_ref.rollout.multi_turn.enable=true", "actor_rollout_ref.rollout.agent.default_agent_loop=x"]
)
def test_multi_turn_names_the_agents_distribution_before_the_run_starts(
    lean: Any, run: Any, tmp_path: Path, key: str
) -> None:
    """Multi-turn turned on with no plugin to roll it out is one line naming the key and the ``pip install``
    line, before anything is written; a single-turn config does not mention the plugin."""
    args = ["data.train_files=x.parquet", "actor_rollout_ref.model.path=m"]
    result = run([lean.python, "-m", "rlcore", "run", "--dry-run", *args, key], cwd=tmp_path, check=False)
    assert result.returncode == 2, result.stderr
    assert (
        f"error: {key}: multi-turn rollouts are provided by rlcore-plugin-agents, which is not installed: "
        "pip install rlcore-plugin-agents\n" in result.stderr
    ), result.stderr
    assert "Traceback" not in result.stderr
    assert not list(tmp_path.iterdir()), "nothing is written"
    single = run([lean.python, "-m", "rlcore", "run", "--dry-run", *args], cwd=tmp_path, check=False)
    assert "rlcore-plugin-agents" not in single.stdout + single.stderr, single.stderr
