"""Configuration: verl's key tree, overrides, files, presets, errors that name the key, derived quantities."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from rlcore.cli import cli
from rlcore.config import ConfigError, derive_quantities, load_config

SEED_COMMAND = Path(__file__).resolve().parents[2] / "shared" / "seed-command.txt"


def seed_overrides() -> list[str]:
    """The seed command's ``key=value`` arguments, exactly as written (``$@`` dropped)."""
    text = SEED_COMMAND.read_text().replace("\\\n", " ")
    args = shlex.split(text)
    assert args[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    return [a for a in args[3:] if a != "$@"]


@pytest.mark.skipif(not SEED_COMMAND.exists(), reason="shared/seed-command.txt is not beside the checkout")
def test_seed_command_is_accepted_verbatim() -> None:
    cfg = load_config(overrides=seed_overrides())
    assert cfg.algorithm.adv_estimator == "grpo"
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-6
    assert cfg.actor_rollout_ref.rollout.response_length == 1024, "interpolated from data.max_response_length"
    assert cfg.trainer.logger == ["console"]
    assert cfg.actor_rollout_ref.ref.fsdp_config.param_offload is True
    derived = derive_quantities(cfg)
    assert derived.responses_per_step == 3072
    assert derived.responses_per_mini_batch_per_rank == 240
    assert derived.grad_accumulation_steps == 12
    assert derived.mini_batches_per_epoch == 13
    assert any("last mini-batch holds 64 prompts" in note for note in derived.notes)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("actor_rollout_ref.actor.optim.lrr=1", "unknown config key 'actor_rollout_ref.actor.optim.lrr'. Did you mean 'actor_rollout_ref.actor.optim.lr'?"),
        ("actor.optim.lr=1", "Did you mean 'actor_rollout_ref.actor.optim.lr'?"),
        ("data.train_batch_size=abc", "data.train_batch_size='abc' has the wrong type: expected int"),
        ("trainer.total_epochs=2.5", "expected int"),
        ("trainer.val_before_train=3", "expected bool"),
        ("data=1", "'data' is a config section, not a value"),
        ("trainer.logger", "is not of the form key=value"),
        ("=3", "empty key"),
    ],
)
def test_bad_overrides_name_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides=[override])
    assert message in str(info.value)


def test_values_are_parsed_like_verl_command_lines() -> None:
    cfg = load_config(overrides=["actor_rollout_ref.actor.optim.lr=1e-6", "trainer.logger=['console','jsonl']",
                                 "data.filter_overlong_prompts=True", "trainer.resume_from_path=None",
                                 "data.train_files=[a.parquet,b.parquet]"])
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-6
    assert list(cfg.trainer.logger) == ["console", "jsonl"]
    assert cfg.data.filter_overlong_prompts is True and cfg.trainer.resume_from_path is None
    assert list(cfg.data.train_files) == ["a.parquet", "b.parquet"]


def test_free_form_sections_and_plus_keys() -> None:
    cfg = load_config(overrides=["reward_model.reward_kwargs.alpha=2", "+my_plugin.setting=3"])
    assert cfg.reward_model.reward_kwargs.alpha == 2 and cfg.my_plugin.setting == 3


def test_files_then_overrides(tmp_path: Path) -> None:
    first = tmp_path / "a.yaml"
    first.write_text("data:\n  train_batch_size: 8\ntrainer:\n  total_epochs: 3\n")
    second = tmp_path / "b.yaml"
    second.write_text("trainer:\n  total_epochs: 4\n")
    cfg = load_config(files=[str(first), str(second)], overrides=["data.train_batch_size=16"])
    assert cfg.trainer.total_epochs == 4 and cfg.data.train_batch_size == 16


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("data:\n  train_batch_sise: 8\n", "unknown config key 'data.train_batch_sise'. Did you mean 'data.train_batch_size'?"),
        ("data: [1, 2\n", "is not valid YAML"),
        ("- 1\n- 2\n", "must contain a mapping"),
    ],
)
def test_bad_config_files_name_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(files=[str(path)])
    assert "bad.yaml" in str(info.value) and message in str(info.value)


def test_missing_config_file() -> None:
    with pytest.raises(ConfigError, match="config file 'nope.yaml' does not exist"):
        load_config(files=["nope.yaml"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=8"], "must not exceed data.train_batch_size"),
        (["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"], "must be divisible by actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu (3)"),
        (["data.train_batch_size=3", "actor_rollout_ref.actor.ppo_mini_batch_size=3", "trainer.n_gpus_per_node=2",
          "trainer.executor=ray"], "cannot be split evenly over 2 data-parallel ranks"),
        (["trainer.n_gpus_per_node=2"], "trainer.executor=local runs a single process"),
        (["trainer.executor=slurm"], "trainer.executor must be 'local' or 'ray'"),
        (["data.truncation=sideways"], "data.truncation must be one of left, right, middle, error"),
        (["actor_rollout_ref.rollout.n=0"], "actor_rollout_ref.rollout.n must be a positive integer"),
    ],
)
def test_batch_arithmetic_is_checked_before_anything_starts(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        derive_quantities(load_config(overrides=overrides))
    assert message in str(info.value)


def test_derived_quantities_without_micro_batch() -> None:
    derived = derive_quantities(load_config(overrides=["data.train_batch_size=16", "actor_rollout_ref.rollout.n=8",
                                                       "actor_rollout_ref.actor.ppo_mini_batch_size=8"]))
    assert derived.micro_batch_per_rank == 64 and derived.grad_accumulation_steps == 1
    assert "ppo_micro_batch_size_per_gpu is not set" in derived.summary()


def test_config_show_prints_the_resolved_tree() -> None:
    result = CliRunner().invoke(cli, ["config", "show", "data.train_files=x.parquet", "data.max_response_length=7"])
    assert result.exit_code == 0, result.output
    assert "response_length: 7" in result.output, "interpolations are resolved"
    assert "fsdp_config:" in result.output, "plugin sections are included"


def test_config_show_reports_errors_without_traceback() -> None:
    result = CliRunner().invoke(cli, ["config", "show", "data.train_batch_sise=1"])
    assert result.exit_code == 2
    assert "error: command line: unknown config key 'data.train_batch_sise'" in result.output
    assert "Traceback" not in result.output


def test_run_without_data_in_a_config_file_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text("trainer:\n  total_epochs: 1\n")
    result = CliRunner().invoke(cli, ["run", str(path), "--dry-run"])
    assert result.exit_code == 2
    assert "data.train_files is not set" in result.output


def test_dry_run_prints_the_plan(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["run", "--dry-run", "data.train_files=x.parquet", "actor_rollout_ref.model.path=m",
                                      "algorithm.adv_estimator=grpo", "data.train_batch_size=8",
                                      "actor_rollout_ref.actor.ppo_mini_batch_size=4"])
    assert result.exit_code == 0, result.output
    assert "prompts per step: 8 x n=1 -> 8 responses" in result.output
    assert "mini-batches per step: 2 x 1 epoch(s)" in result.output
