"""A core without rlcore-plugin-tasks, rlcore-plugin-sft, rlcore-plugin-judge, rlcore-plugin-profiler and
rlcore-plugin-agents (a venv that hides the five distributions): the default run, ``rlcore sft``, ``rlcore data
arith-sft``, ``rlcore data gsm8k`` / ``geo3k``, ``reward_model.reward_manager=judge``, the profiler's keys and
multi-turn each fail naming the distribution to install.

Every command of this file runs once, by one interpreter of that venv (:data:`DRIVER`): each one through the
console script's entry point (:func:`rlcore.cli.main`, the plugins loaded afresh), in a folder of its own, with
what it writes to file descriptors 1 and 2 captured, so the interpreter and its imports start once instead of
once per command. The tests read their commands' results.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: the configuration the run commands below start from (no data or model is read: each fails before)
BASE = ("data.train_files=x.parquet", "actor_rollout_ref.model.path=m")
JUDGE = (*BASE, "reward_model.reward_manager=judge")
PROFILER_KEYS = ("global_profiler.tool=torch", "actor_rollout_ref.actor.profiler.enable=true")
MULTI_TURN_KEYS = (
    "actor_rollout_ref.rollout.multi_turn.enable=true",
    "actor_rollout_ref.rollout.agent.default_agent_loop=x",
)
SFT_COMMANDS = (("sft",), ("sft", "--dry-run"), ("data", "arith-sft"))
DATA_COMMANDS = (("data", "gsm8k"), ("data", "geo3k", "--input", "."))
#: every command this file runs, by name: the arguments after ``rlcore``
COMMANDS: dict[str, tuple[str, ...]] = {
    "default run": ("run", "--dry-run"),
    **{" ".join(command): command for command in (*SFT_COMMANDS, *DATA_COMMANDS)},
    "judge --dry-run": ("run", "--dry-run", *JUDGE),
    "judge": ("run", *JUDGE),
    **{key: ("run", "--dry-run", *BASE, key) for key in (*PROFILER_KEYS, *MULTI_TURN_KEYS)},
    "single-turn": ("run", "--dry-run", *BASE),
}

#: run by the lean venv's interpreter: ``DRIVER COMMANDS_JSON REPORT``, where COMMANDS_JSON maps a name to
#: ``[folder, arguments]``; writes ``{name: {returncode, stdout, stderr}}`` to REPORT
DRIVER = """
import json, os, sys, tempfile, traceback
from rlcore.api import set_plugin_manager
from rlcore.cli import main


def run(folder, args):
    os.chdir(folder)
    set_plugin_manager(None)
    sys.argv = ["rlcore", *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush(); sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else exc.code is not None
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os.dup2(saved[0], 1); os.dup2(saved[1], 2)
            os.close(saved[0]); os.close(saved[1])
        out.seek(0); err.seek(0)
        return {"returncode": int(code), "stdout": out.read().decode(), "stderr": err.read().decode()}


commands, report = json.loads(sys.argv[1]), sys.argv[2]
results = {name: run(folder, args) for name, (folder, args) in commands.items()}
with open(report, "w") as file:
    json.dump(results, file)
"""


@dataclass(frozen=True)
class Said:
    """A command's exit status, output and the (otherwise empty) folder it ran in."""

    returncode: int
    stdout: str
    stderr: str
    folder: Path


@pytest.fixture(scope="module")
def lean(tmp_path_factory: pytest.TempPathFactory, make_venv: Any) -> Any:
    """This environment without the five distributions."""
    hidden = (
        *("rlcore-plugin-tasks", "rlcore-plugin-sft", "rlcore-plugin-judge"),
        *("rlcore-plugin-profiler", "rlcore-plugin-agents"),
    )
    return make_venv(tmp_path_factory.mktemp("lean") / "venv", hidden=hidden)


@pytest.fixture(scope="module")
def said(tmp_path_factory: pytest.TempPathFactory, lean: Any, run: Any) -> dict[str, Said]:
    """Every command of :data:`COMMANDS` run by :data:`DRIVER` in the lean venv, each in an empty folder."""
    root = tmp_path_factory.mktemp("commands")
    folders = {name: root / f"command-{index}" for index, name in enumerate(COMMANDS)}
    for folder in folders.values():
        folder.mkdir()
    commands = {name: [str(folders[name]), list(args)] for name, args in COMMANDS.items()}
    report = root / "report.json"
    run([lean.python, "-c", DRIVER, json.dumps(commands), report], cwd=root)
    return {name: Said(**row, folder=folders[name]) for name, row in json.loads(report.read_text()).items()}


def test_the_default_run_names_the_tasks_distribution(said: dict[str, Said]) -> None:
    result = said["default run"]
    assert result.returncode == 2, result.stderr
    assert (
        "error: unknown preset 'arith-cpu': it is provided by rlcore-plugin-tasks, which is not installed: "
        "pip install rlcore-plugin-tasks." in result.stderr
    ), result.stderr
    assert not list(result.folder.iterdir()), "nothing is written"


@pytest.mark.parametrize("command", SFT_COMMANDS, ids=" ".join)
def test_the_sft_commands_name_the_sft_distribution(said: dict[str, Said], command: tuple[str, ...]) -> None:
    result = said[" ".join(command)]
    path = " ".join(command[: 2 if command[0] == "data" else 1])
    assert result.returncode == 2, result.stderr
    assert (
        f"Error: No such command {path.split()[-1]!r}: `rlcore {path}` is added by rlcore-plugin-sft, which is not "
        "installed: pip install rlcore-plugin-sft." in result.stderr
    ), result.stderr


@pytest.mark.parametrize("command", DATA_COMMANDS, ids=" ".join)
def test_the_verl_data_commands_name_the_tasks_distribution(said: dict[str, Said], command: tuple[str, ...]) -> None:
    result = said[" ".join(command)]
    assert result.returncode == 2, result.stderr
    assert (
        f"Error: No such command {command[1]!r}: `rlcore data {command[1]}` is added by rlcore-plugin-tasks, which is "
        "not installed: pip install rlcore-plugin-tasks." in result.stderr
    ), result.stderr
    assert not list(result.folder.iterdir()), "nothing is written"


def test_the_judge_reward_manager_names_the_judge_distribution_before_the_run_starts(said: dict[str, Said]) -> None:
    for result in (said["judge --dry-run"], said["judge"]):
        assert result.returncode == 2, result.stderr
        assert (
            "error: reward_model.reward_manager=judge: unknown reward_manager 'judge': it is provided by "
            "rlcore-plugin-judge, which is not installed: pip install rlcore-plugin-judge." in result.stderr
        ), result.stderr
        assert not list(result.folder.iterdir()), "nothing is written: the run did not start"


@pytest.mark.parametrize("key", PROFILER_KEYS)
def test_a_key_of_the_profiler_names_the_profiler_distribution_before_the_run_starts(
    said: dict[str, Said], key: str
) -> None:
    """A verl key that rlcore-plugin-profiler declares is never silently ignored: one line naming the key and
    the ``pip install`` line, before anything is written."""
    result = said[key]
    assert result.returncode == 2, result.stderr
    name = key.split("=")[0]
    assert (
        f"error: command line: config key {name!r} is a key of rlcore-plugin-profiler, which is not installed: "
        "pip install rlcore-plugin-profiler\n" in result.stderr
    ), result.stderr
    assert "Traceback" not in result.stderr and "unknown config key" not in result.stderr
    assert not list(result.folder.iterdir()), "nothing is written"


@pytest.mark.parametrize("key", MULTI_TURN_KEYS)
def test_multi_turn_names_the_agents_distribution_before_the_run_starts(said: dict[str, Said], key: str) -> None:
    """Multi-turn turned on with no plugin to roll it out is one line naming the key and the ``pip install``
    line, before anything is written; a single-turn config does not mention the plugin."""
    result = said[key]
    assert result.returncode == 2, result.stderr
    assert (
        f"error: {key}: multi-turn rollouts are provided by rlcore-plugin-agents, which is not installed: "
        "pip install rlcore-plugin-agents\n" in result.stderr
    ), result.stderr
    assert "Traceback" not in result.stderr
    assert not list(result.folder.iterdir()), "nothing is written"
    single = said["single-turn"]
    assert "rlcore-plugin-agents" not in single.stdout + single.stderr, single.stderr
