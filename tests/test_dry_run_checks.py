"""What used to fail only after the model loaded fails the dry run, each problem naming its key, all at once: a
config file that does not parse (which stops the checks there), a reward function the file does not define, value
ranges, names the algorithm code rejects, and sampling settings that cannot train. The cases of the issue run
``rlcore run --dry-run`` in a subprocess; the rest go through the CLI in-process (``rlcore_testkit.runs.dry_run``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rlcore_testkit.runs import dry_run

from rlcore.config.ranges import OPTIM_RANGES, SAMPLING_RANGES, Range
from rlcore.config.sections.actor import OptimConfig
from rlcore.config.sections.rollout import ValKwargs
from rlcore.errors import RLCoreError
from rlcore.modelkit.optim import build_optimizer
from rlcore.rollout.sampling import SamplingParams

REWARD = """
import math

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(solution_str.strip() == ground_truth)

def _private():
    return 0
"""
BASE = ("data.train_files=x.parquet", "actor_rollout_ref.model.path=m")


def rlcore_dry_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m rlcore run --dry-run ARGS`` in a subprocess (this checkout's code, no RLCORE_* variables)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLCORE_")}
    return subprocess.run(
        [sys.executable, "-m", "rlcore", "run", "--dry-run", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=180,
    )


def errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error: ")]


def test_a_config_file_that_does_not_parse_stops_the_dry_run_there(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(
        "data:\n  train_batch_size: 4\n  max_prompt_length: [1\nactor_rollout_ref:\n  model:\n    path: m\n"
    )
    result = rlcore_dry_run("run.yaml", "data.train_files=x.parquet", cwd=tmp_path)
    assert result.returncode == 2
    assert errors(result.stderr) == [
        "error: config file 'run.yaml' is not valid YAML: line 4, column 18: expected ',' or ']', but got ':' "
        "(while parsing a flow sequence at line 3, column 22)"
    ]
    assert "problems found" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("data:\n\ttrain_batch_size: 4\n", "line 2, column 1: found character '\\t' that cannot start any token"),
        ("- 1\n- 2\n", "must contain a mapping at the top level"),
        ("defaults:\n  - nowhere\n", "defaults entry 'nowhere': no nowhere.yaml in"),
    ],
    ids=["tab", "list", "missing-defaults-entry"],
)
def test_a_config_file_that_cannot_be_read_is_the_only_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    result = dry_run(str(path), "data.nope=1")  # an unknown key: not checked once the file fails
    assert result.exit_code == 2
    (line,) = errors(result.output)
    assert f"config file '{path}'" in line and message in line


def test_the_issue_cases_fail_the_dry_run_together(tmp_path: Path) -> None:
    """A reward function the file does not define, a negative learning rate and temperature 0 with rollout
    log-probs: one subprocess, three problems, each naming its key."""
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    result = rlcore_dry_run(
        *BASE,
        f"custom_reward_function.path={reward}",
        "custom_reward_function.name=compute_scor",
        "actor_rollout_ref.actor.optim.lr=-1e-6",
        "actor_rollout_ref.rollout.temperature=0",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert errors(result.stderr) == [
        "error: actor_rollout_ref.actor.optim.lr must be a number >= 0, got -1e-06",
        "error: actor_rollout_ref.rollout.temperature=0 cannot train: the actor computes the log-probs of the sampled "
        "tokens under softmax(logits / temperature), undefined at 0 (greedy decoding); train at a temperature > 0 "
        "(verl's default is 1.0) and decode greedily in validation (actor_rollout_ref.rollout.val_kwargs.temperature=0)",
        f"error: custom_reward_function.path='{reward}' defines no 'compute_scor' (custom_reward_function.name); "
        "it defines: compute_score, math",
    ]
    assert "3 problems found; nothing was started" in result.stderr


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("actor_rollout_ref.actor.optim.weight_decay=-0.01", "optim.weight_decay must be a number >= 0, got -0.01"),
        ("critic.optim.lr=-1", "critic.optim.lr must be a number >= 0, got -1"),
        ("actor_rollout_ref.actor.optim.betas=[0.9,1.0]", "optim.betas must be 2 numbers in [0, 1), got [0.9, 1.0]"),
        ("actor_rollout_ref.actor.optim.min_lr_ratio=1.5", "optim.min_lr_ratio must be a number in [0, 1], got 1.5"),
        ("actor_rollout_ref.actor.optim.lr_warmup_steps=-2", "lr_warmup_steps must be an integer >= -1, got -2"),
        ("actor_rollout_ref.actor.optim.lr=.nan", "optim.lr must be a number >= 0, got nan"),
        ("actor_rollout_ref.actor.clip_ratio_low=-0.2", "clip_ratio_low must be a number >= 0 or null, got -0.2"),
        ("actor_rollout_ref.actor.clip_ratio_c=1", "clip_ratio_c must be a number > 1, got 1"),
        ("actor_rollout_ref.actor.kl_loss_coef=-0.1", "kl_loss_coef must be a number >= 0, got -0.1"),
        ("algorithm.kl_ctrl.kl_coef=-0.1", "algorithm.kl_ctrl.kl_coef must be a number >= 0, got -0.1"),
        ("algorithm.gamma=1.1", "algorithm.gamma must be a number in [0, 1], got 1.1"),
        ("critic.cliprange_value=-1", "critic.cliprange_value must be a number >= 0, got -1"),
        ("critic.ppo_epochs=0", "critic.ppo_epochs must be an integer >= 1, got 0"),
        ("actor_rollout_ref.rollout.top_p=0", "rollout.top_p must be a number in (0, 1], got 0"),
        ("actor_rollout_ref.rollout.val_kwargs.top_p=1.5", "val_kwargs.top_p must be a number in (0, 1], got 1.5"),
        ("actor_rollout_ref.actor.entropy_coeff=.inf", "actor.entropy_coeff must be a number, got inf"),
        ("actor_rollout_ref.rollout.val_kwargs.temperature=-1", "val_kwargs.temperature must be a number >= 0"),
        ("actor_rollout_ref.rollout.gpu_memory_utilization=0", "gpu_memory_utilization must be a number in (0, 1]"),
        ("actor_rollout_ref.actor.loss_agg_mode=mean", "unknown actor_rollout_ref.actor.loss_agg_mode 'mean'"),
        ("algorithm.kl_penalty=kl2", "unknown algorithm.kl_penalty 'kl2'"),
        (
            "actor_rollout_ref.actor.kl_loss_type=full",
            "actor_rollout_ref.actor.kl_loss_type 'full': the full-distribution",
        ),
        ("algorithm.kl_ctrl.type=pid", "unknown algorithm.kl_ctrl.type 'pid'; expected one of: fixed, adaptive"),
        ("critic.optim.lr_scheduler_type=linear", "critic.optim.lr_scheduler_type='linear' is not a scheduler"),
        ("actor_rollout_ref.rollout.do_sample=false", "actor_rollout_ref.rollout.do_sample=false cannot train"),
    ],
)
def test_a_value_the_workers_would_reject_fails_the_dry_run(override: str, message: str) -> None:
    result = dry_run(*BASE, override)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_the_adaptive_kl_controller_is_checked_only_when_chosen() -> None:
    assert dry_run(*BASE, "algorithm.kl_ctrl.horizon=0").exit_code == 0
    result = dry_run(*BASE, "algorithm.kl_ctrl.horizon=0", "algorithm.kl_ctrl.type=adaptive")
    assert result.exit_code == 2
    assert "algorithm.kl_ctrl.horizon must be positive for the adaptive controller, got 0" in result.output


def test_all_value_problems_are_reported_at_once() -> None:
    result = dry_run(
        *BASE,
        "actor_rollout_ref.actor.optim.lr=-1",
        "actor_rollout_ref.rollout.top_p=0",
        "algorithm.lam=2",
        "trainer.total_epochs=0",
        "actor_rollout_ref.rollout.do_sample=false",
    )
    assert result.exit_code == 2
    assert "5 problems found; nothing was started" in result.output


def test_greedy_validation_and_val_only_runs_are_accepted_with_notes() -> None:
    """Greedy decoding belongs to validation; a run that only validates may decode greedily throughout; the
    allowed-but-surprising combinations are named in notes."""
    default = dry_run(*BASE)
    assert default.exit_code == 0, default.output
    assert "note: actor_rollout_ref.rollout" not in default.output
    val_only = dry_run(*BASE, "trainer.val_only=true", "actor_rollout_ref.rollout.temperature=0")
    assert val_only.exit_code == 0, val_only.output
    noted = dry_run(*BASE, "actor_rollout_ref.rollout.top_p=0.9", "actor_rollout_ref.rollout.val_kwargs.n=4")
    assert noted.exit_code == 0, noted.output
    assert (
        "note: actor_rollout_ref.rollout.top_p=0.9: responses are sampled from the filtered distribution, but the "
        "log-probs of the update are those of the whole distribution at the temperature (as in verl)"
    ) in noted.output
    assert "note: actor_rollout_ref.rollout.val_kwargs.n=4 with greedy validation" in noted.output


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def compute_score(:\n    pass\n", "is not valid Python: line 1, column 19: invalid syntax"),
        ("def score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n", "defines no"),
    ],
    ids=["syntax-error", "no-default-name"],
)
def test_a_reward_file_is_read_not_run(tmp_path: Path, source: str, message: str) -> None:
    """The default name is compute_score; a syntax error names the line. The file is parsed, never imported:
    a file that would exit when imported does not stop the dry run."""
    reward = tmp_path / "reward.py"
    reward.write_text(source)
    result = dry_run(*BASE, f"custom_reward_function.path={reward}")
    assert result.exit_code == 2
    assert f"error: custom_reward_function.path='{reward}' {message}" in result.output
    exits = tmp_path / "exits.py"
    exits.write_text("import sys\nsys.exit(3)\n\ndef compute_score(*args):\n    return 0.0\n")
    assert dry_run(*BASE, f"custom_reward_function.path={exits}").exit_code == 0


def test_names_the_source_cannot_show_are_not_ruled_out(tmp_path: Path) -> None:
    """A star import or a module ``__getattr__`` may define any name: the dry run leaves it to the import."""
    star = tmp_path / "star.py"
    star.write_text("from math import *\n")
    assert dry_run(*BASE, f"custom_reward_function.path={star}", "custom_reward_function.name=anything").exit_code == 0
    guarded = tmp_path / "guarded.py"
    guarded.write_text(
        "try:\n    from fast_scorer import score\nexcept ImportError:\n    def score(*a):\n        return 0\n"
    )
    assert dry_run(*BASE, f"custom_reward_function.path={guarded}", "custom_reward_function.name=score").exit_code == 0


def test_a_custom_dataset_class_is_checked_the_same_way(tmp_path: Path) -> None:
    module = tmp_path / "my_data.py"
    module.write_text("class MyDataset:\n    pass\n")
    ok = dry_run(*BASE, f"data.custom_cls.path={module}", "data.custom_cls.name=MyDataset")
    assert ok.exit_code == 0, ok.output
    wrong = dry_run(*BASE, f"data.custom_cls.path={module}", "data.custom_cls.name=MyDatset")
    assert wrong.exit_code == 2
    assert f"data.custom_cls.path='{module}' defines no 'MyDatset' (data.custom_cls.name); it defines: MyDataset" in (
        wrong.output
    )
    unnamed = dry_run(*BASE, f"data.custom_cls.path={module}")
    assert f"data.custom_cls.path='{module}' is set but data.custom_cls.name is not" in unnamed.output


def test_the_workers_check_their_sections_with_the_same_table() -> None:
    """The optimizer builder and the sampling parameters read :data:`OPTIM_RANGES` / :data:`SAMPLING_RANGES`,
    so a value the dry run accepts is one they accept, with the same message otherwise."""
    import torch

    with pytest.raises(RLCoreError, match=r"^actor.optim.lr must be a number >= 0, got -1; actor.optim.betas must be"):
        build_optimizer([torch.nn.Parameter(torch.zeros(2))], OptimConfig(lr=-1, betas=[0.9]), "actor.optim")
    with pytest.raises(
        RLCoreError, match=r"^actor_rollout_ref.rollout.val_kwargs.top_p must be a number in \(0, 1\], got 0$"
    ):
        SamplingParams.from_config(ValKwargs(top_p=0))
    assert OPTIM_RANGES["lr"] == Range(low=0) and SAMPLING_RANGES["top_p"].describe() == "a number in (0, 1]"


def test_the_sft_dry_run_checks_its_optimizer_with_the_same_table() -> None:
    from click.testing import CliRunner
    from rlcore_plugin_sft.commands import sft

    from rlcore.cli import RLCoreGroup

    cli = RLCoreGroup(commands={"sft": sft})  # the command rlcore-plugin-sft adds, under rlcore's error handling
    args = ["sft", "--dry-run", "data.train_files=x.parquet", "model.partial_pretrain=m", "optim.lr=-1"]
    result = CliRunner().invoke(cli, [*args, "optim.min_lr_ratio=2"])
    assert result.exit_code == 2
    assert errors(result.output) == [
        "error: optim.lr must be a number >= 0, got -1",
        "error: optim.min_lr_ratio must be a number in [0, 1], got 2",
    ]
