"""User code cannot end a run silently: ``sys.exit()`` or a ``KeyboardInterrupt`` raised by a reward file, a
scorer (inline and in scorer processes), a tool, a plugin hook or a custom dataset is an error naming the
file and line, the run's ``summary.json`` says it failed, and the exit status is not 0; so is ``os._exit()``
called by an inline scorer, a reward file at import or a plugin hook while the config resolves. A real
Ctrl-C still stops the run as one, and a process that user code forks still ends with ``os._exit()``.

The tests that call ``os._exit`` in this process use a status that is not 0, so that a guard that stopped
working ends the test session with a failure, not with a silent success."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import posix
import signal
import subprocess
import sys
import textwrap
import threading
import types
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rlcore_plugin_agents.tools import ToolExecutor
from rlcore_testkit.contracts.rewards import make_reward_batch
from rlcore_testkit.runs import dry_run, make_tiny_task, tiny_overrides, tiny_run

import rlcore
from rlcore.api import Tool, ToolCall
from rlcore.cli import cli
from rlcore.config.schema import CustomRewardFunctionConfig
from rlcore.config.sections.reward_model import RewardModelConfig
from rlcore.graceful_stop import SignalInterrupt, StopRequest
from rlcore.registry import Registry
from rlcore.reward import RewardError
from rlcore.reward.managers import BatchRewardManager, NaiveRewardManager
from rlcore.reward.scoring import build_scorer
from rlcore.usercode import UserCodeExit, contain_exit


def exits(data_source, solution_str, ground_truth, extra_info=None):
    """Ends the process on sample '2'."""
    if ground_truth == "2":
        sys.exit(3)
    return 1.0


def interrupts(data_source, solution_str, ground_truth, extra_info=None):
    """Raises KeyboardInterrupt itself (no Ctrl-C)."""
    raise KeyboardInterrupt


def batched_exit(data_sources, solution_strs, ground_truths, extra_infos):
    exit()


def _line(function: Any, text: str) -> int:
    """The line of ``function`` holding ``text``."""
    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if text in line)


@pytest.fixture(params=["builtin", "wandb"], ids=["sys.exit", "wandb-exit-hooks"])
def exit_function(request: pytest.FixtureRequest) -> Any:
    """``sys.exit`` as Python has it, or replaced by a library's function: wandb's own exit hooks, installed
    as ``wandb.init`` installs them."""
    if request.param == "builtin":
        yield
        return
    exit_hooks = pytest.importorskip("wandb.sdk.lib.exit_hooks")
    saved = sys.exit, sys.excepthook
    exit_hooks.ExitHooks().hook()
    try:
        yield
    finally:
        sys.exit, sys.excepthook = saved


@pytest.mark.parametrize("timeout", [0, 10], ids=["inline", "scorer-processes"])
def test_a_scorer_calling_sys_exit_stops_the_run_naming_the_line(tiny_tokenizer, timeout: float, exit_function) -> None:
    """The message names the user's line, also when a library replaced ``sys.exit``."""
    batch, _ = make_reward_batch(tiny_tokenizer)
    manager = NaiveRewardManager(tiny_tokenizer, exits, RewardModelConfig(scorer_timeout=timeout))
    try:
        with pytest.raises(UserCodeExit) as caught:
            manager(batch)
    finally:
        manager.close()
    message = str(caught.value)
    assert "the reward scorer (data_source 'contract') tried to end the run: SystemExit(3)" in message
    assert f"{__file__}:{_line(exits, 'sys.exit(3)')} (in exits)" in message


@pytest.mark.parametrize("timeout", [0, 10], ids=["inline", "scorer-processes"])
def test_a_scorer_raising_keyboard_interrupt_itself_is_an_error(tiny_tokenizer, timeout: float) -> None:
    batch, _ = make_reward_batch(tiny_tokenizer)
    manager = NaiveRewardManager(tiny_tokenizer, interrupts, RewardModelConfig(scorer_timeout=timeout))
    try:
        with StopRequest(), pytest.raises(UserCodeExit) as caught:  # the run's handlers: a real Ctrl-C is told apart
            manager(batch)
    finally:
        manager.close()
    assert f"KeyboardInterrupt (no Ctrl-C was pressed) raised at {__file__}:" in str(caught.value)


def test_a_batched_scorer_calling_exit_is_an_error(tiny_tokenizer) -> None:
    batch, _ = make_reward_batch(tiny_tokenizer)
    with pytest.raises(
        UserCodeExit, match=r"SystemExit\(None\) raised at .*test_user_code_exit.py:\d+ \(in batched_exit\)"
    ):
        BatchRewardManager(tiny_tokenizer, batched_exit, RewardModelConfig(scorer_timeout=0))(batch)


def os_exits(data_source, solution_str, ground_truth, extra_info=None):
    """Ends the process with ``os._exit`` on sample '2'."""
    if ground_truth == "2":
        os._exit(3)
    return 1.0


def os_exit_swallowed(data_source, solution_str, ground_truth, extra_info=None):
    """Calls ``os._exit`` and catches what it raises, as ``except BaseException`` around a library call would."""
    try:
        posix._exit(3)
    except BaseException:  # noqa: BLE001 - the point of the test
        pass
    return 1.0


def _ends_the_process() -> None:
    os._exit(3)


def os_exit_in_a_thread(data_source, solution_str, ground_truth, extra_info=None):
    """A thread the scorer starts calls ``os._exit``."""
    thread = threading.Thread(target=_ends_the_process)
    thread.start()
    thread.join()
    return 1.0


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the thread's ProcessExit
@pytest.mark.parametrize(
    ("scorer", "where"),
    [
        (os_exits, "os._exit(3)"),
        (os_exit_swallowed, "posix._exit(3)"),
        (os_exit_in_a_thread, "os._exit(3)"),
    ],
    ids=["os._exit", "caught-by-the-scorer", "from-a-thread"],
)
def test_os_exit_in_an_inline_scorer_stops_the_run_naming_the_line(tiny_tokenizer, scorer, where: str) -> None:
    """An inline scorer (in the controller) calling ``os._exit`` would end the run at once with status 0."""
    batch, _ = make_reward_batch(tiny_tokenizer)
    caller = _ends_the_process if scorer is os_exit_in_a_thread else scorer
    with pytest.raises(UserCodeExit) as caught:
        NaiveRewardManager(tiny_tokenizer, scorer, RewardModelConfig(scorer_timeout=0))(batch)
    assert str(caught.value) == (
        f"the reward scorer (data_source 'contract') tried to end the run: os._exit(3) called at "
        f"{__file__}:{_line(caller, where)} (in {caller.__name__}); user code must return or raise an exception "
        "instead of ending the process"
    )


def forks_a_child_that_exits(data_source, solution_str, ground_truth, extra_info=None):
    """Forks a child that ends with ``os._exit(7)``; scores the child's exit status."""
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    return float(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))


def test_a_child_forked_by_an_inline_scorer_still_ends_with_os_exit(tiny_tokenizer) -> None:
    batch, _ = make_reward_batch(tiny_tokenizer, ["a", "b"])
    result = NaiveRewardManager(tiny_tokenizer, forks_a_child_that_exits, RewardModelConfig(scorer_timeout=0))(batch)
    assert result.token_level_scores.sum(-1).tolist() == [7.0, 7.0]


def test_os_exit_ends_the_process_outside_user_code_and_in_a_forked_child() -> None:
    """Outside a block of user code ``os._exit`` is Python's; a child forked by user code returning into rlcore
    is ended there (it would go on as a second copy of the run)."""
    code = textwrap.dedent(
        """
        import os
        from rlcore.usercode import UserCodeExit, contain_exit, user_call

        try:
            with contain_exit("the hook"):
                os._exit(5)
        except UserCodeExit as exc:
            print(exc, flush=True)
        with user_call("the forking scorer"):
            os.fork()  # no os._exit in the child: it returns here
        print("after the call in", os.getpid(), flush=True)
        os.wait()  # the child, ended
        raise SystemExit(4)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 4, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("the hook tried to end the run: os._exit(5) called at <string>:7 (in <module>)")
    assert len(lines) == 2 and lines[1].startswith("after the call in "), "only the parent goes on"
    assert ", forked by the forking scorer, returned into rlcore and was ended there" in proc.stderr


def test_a_reward_file_calling_os_exit_at_import_is_named(tmp_path: Path) -> None:
    reward = tmp_path / "os_exiting_reward.py"
    reward.write_text("import os\n\nos._exit(3)\n\ndef compute_score(**kwargs):\n    return 1.0\n")
    with pytest.raises(RewardError) as caught:
        build_scorer(CustomRewardFunctionConfig(path=str(reward), name="compute_score"), Registry())
    assert str(caught.value) == (
        f"custom_reward_function.path={str(reward)!r}: importing the file tried to end the run: os._exit(3) "
        f"called at {reward}:3 (in <module>); a file rlcore imports must not end the process"
    )


def test_contain_exit_passes_on_other_errors_and_real_signals() -> None:
    with pytest.raises(ValueError), contain_exit("the block"):
        raise ValueError("not an exit")
    with pytest.raises(SignalInterrupt), contain_exit("the block"):
        raise SignalInterrupt


def sleeps_through_signals(data_source, solution_str, ground_truth, extra_info=None):
    """Sends the process SIGINT twice (a user pressing Ctrl-C twice), then sleeps."""
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGINT)
    import time

    time.sleep(30)
    return 1.0


def test_a_real_ctrl_c_in_an_inline_scorer_still_stops_the_run(tiny_tokenizer) -> None:
    batch, _ = make_reward_batch(tiny_tokenizer, ["a"])
    with StopRequest() as stop, pytest.raises(SignalInterrupt):
        NaiveRewardManager(tiny_tokenizer, sleeps_through_signals, RewardModelConfig(scorer_timeout=0))(batch)
    assert stop.caused(SignalInterrupt()) and stop.signum == signal.SIGINT


def test_a_reward_file_calling_sys_exit_at_import_is_named(tmp_path: Path) -> None:
    reward = tmp_path / "exiting_reward.py"
    reward.write_text("import sys\n\nsys.exit(0)\n\ndef compute_score(**kwargs):\n    return 1.0\n")
    config = CustomRewardFunctionConfig(path=str(reward), name="compute_score")
    with pytest.raises(RewardError) as caught:
        build_scorer(config, Registry())
    assert str(caught.value) == (
        f"custom_reward_function.path={str(reward)!r}: importing the file tried to end the run: SystemExit(0) "
        f"raised at {reward}:3 (in <module>); a file rlcore imports must not end the process"
    )


class Quits(Tool):
    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> str:
        raise SystemExit(1)


def test_a_tool_calling_sys_exit_is_an_error_naming_the_tool() -> None:
    schema = {"type": "function", "function": {"name": "quits", "parameters": {"type": "object"}}}
    executor = ToolExecutor({"quits": Quits({}, schema)}, 2, 100, "middle")
    with pytest.raises(UserCodeExit, match=rf"tool 'quits' \({__name__}.Quits\) tried to end the run: SystemExit\(1\)"):
        asyncio.run(executor.call("t0", ToolCall("quits", {}), {}))


# ------------------------------------------------------------------ real runs


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_tiny_task(tmp_path_factory.mktemp("task"))


def test_a_plugin_hook_calling_sys_exit_fails_the_run_with_a_summary(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path], registered
) -> None:
    def on_step_end(run, step, metrics):
        sys.exit(0)

    plugin = types.SimpleNamespace(on_step_end=rlcore.hookimpl(on_step_end))
    with registered(plugin, name="exiting-plugin"), pytest.raises(UserCodeExit) as caught:
        tiny_run(tmp_path, tiny_model_dir, task, "trainer.test_freq=-1")
    message = str(caught.value)
    assert f"user code tried to end the run: SystemExit(0) raised at {__file__}:" in message
    assert "(in on_step_end)" in message
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    assert json.loads((run_dir / "summary.json").read_text())["status"] == f"failed: {message}"


def test_a_dataset_raising_keyboard_interrupt_is_not_taken_for_ctrl_c(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    dataset = tmp_path / "interrupting_dataset.py"
    dataset.write_text(
        "from rlcore.data.rl_dataset import RLDataset\n\n\n"
        "class InterruptingDataset(RLDataset):\n"
        "    def __getitem__(self, i):\n"
        "        self.reads = getattr(self, 'reads', 0) + 1\n"
        "        if self.reads > 4 and self.split == 'train':\n"
        "            raise KeyboardInterrupt\n"
        "        return super().__getitem__(i)\n"
    )
    with pytest.raises(UserCodeExit) as caught:
        tiny_run(
            tmp_path,
            tiny_model_dir,
            task,
            "trainer.test_freq=-1",
            f"data.custom_cls.path={dataset}",
            "data.custom_cls.name=InterruptingDataset",
        )
    assert f"KeyboardInterrupt (no Ctrl-C was pressed) raised at {dataset}:8 (in __getitem__)" in str(caught.value)
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    assert json.loads((run_dir / "summary.json").read_text())["status"].startswith("failed: user code tried")


def test_rlcore_run_exits_non_zero_with_one_line_when_the_reward_file_exits(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    """``rlcore run`` in this process (click's test runner gives the exit status a ``SystemExit`` carries: 0 had
    the reward file's ``sys.exit(0)`` ended the command)."""
    reward = tmp_path / "exiting_reward.py"
    reward.write_text("import sys\nsys.exit(0)\n\ndef compute_score(**kwargs):\n    return 1.0\n")
    args = [*tiny_overrides(tmp_path, tiny_model_dir, task), f"custom_reward_function.path={reward}"]
    result = CliRunner().invoke(cli, ["run", *args], prog_name="rlcore", catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: custom_reward_function.path={str(reward)!r}: importing the file tried to end the run: "
        f"SystemExit(0) raised at {reward}:2 (in <module>); a file rlcore imports must not end the process"
    ]
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    assert json.loads((run_dir / "summary.json").read_text())["status"] == errors[0].replace("error: ", "failed: ")


def test_rlcore_run_fails_with_a_summary_when_an_inline_scorer_calls_os_exit(
    tmp_path: Path, tiny_model_dir: Path, task: dict[str, Path]
) -> None:
    """Before: rc 0 after the first step, no summary, no message."""
    reward = tmp_path / "os_exit_reward.py"
    reward.write_text("import os\n\ndef compute_score(**kwargs):\n    os._exit(0)\n")
    args = [
        *tiny_overrides(tmp_path, tiny_model_dir, task),
        f"custom_reward_function.path={reward}",
        "reward_model.scorer_timeout=0",
        "trainer.total_training_steps=4",
        "trainer.test_freq=-1",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "rlcore", "run", *args], capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: the reward scorer (data_source 'tiny/digits') tried to end the run: os._exit(0) called at "
        f"{reward}:4 (in compute_score); user code must return or raise an exception instead of ending the process"
    ]
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    assert json.loads((run_dir / "summary.json").read_text())["status"] == errors[0].replace("error: ", "failed: ")


def test_a_plugin_exiting_while_the_config_resolves_fails_the_dry_run(registered) -> None:
    def on_config_resolved(config):
        sys.exit(0)

    plugin = types.SimpleNamespace(on_config_resolved=rlcore.hookimpl(on_config_resolved))
    with registered(plugin, name="exiting-config-plugin"):
        result = dry_run("data.train_files=x.parquet", "actor_rollout_ref.model.path=m")
    assert result.exit_code == 2, result.output
    assert "error: a plugin's on_config_resolved hook tried to end the run: SystemExit(0) raised at" in result.output
    assert "(in on_config_resolved)" in result.output


def test_a_plugin_calling_os_exit_while_the_config_resolves_fails_the_dry_run(registered) -> None:
    def on_config_resolved(config):
        os._exit(3)

    plugin = types.SimpleNamespace(on_config_resolved=rlcore.hookimpl(on_config_resolved))
    with registered(plugin, name="os-exiting-config-plugin"):
        result = dry_run("data.train_files=x.parquet", "actor_rollout_ref.model.path=m")
    assert result.exit_code == 2, result.output
    assert "error: a plugin's on_config_resolved hook tried to end the run: os._exit(3) called at" in result.output
