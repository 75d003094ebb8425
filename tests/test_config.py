"""Configuration: verl's key tree, overrides, files, presets, errors that name the key, derived quantities."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rlcore_testkit import runs

from rlcore.cli import cli
from rlcore.config import ConfigError, derive_quantities, load_config, parse_command_line
from rlcore.plugins import load_plugins

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
        (
            "actor_rollout_ref.actor.optim.lrr=1",
            "unknown config key 'actor_rollout_ref.actor.optim.lrr'. Did you mean 'actor_rollout_ref.actor.optim.lr'?",
        ),
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
    cfg = load_config(
        overrides=[
            "actor_rollout_ref.actor.optim.lr=1e-6",
            "trainer.logger=['console','jsonl']",
            "data.filter_overlong_prompts=True",
            "trainer.resume_from_path=None",
            "data.train_files=[a.parquet,b.parquet]",
        ]
    )
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-6
    assert list(cfg.trainer.logger) == ["console", "jsonl"]
    assert cfg.data.filter_overlong_prompts is True and cfg.trainer.resume_from_path is None
    assert list(cfg.data.train_files) == ["a.parquet", "b.parquet"]


def test_free_form_sections_and_plus_keys() -> None:
    """A key below a free-form mapping is accepted, with or without '+'; a key added where nothing reads it is not
    (tests/test_added_keys.py has the verl spellings)."""
    cfg = load_config(overrides=["reward_model.reward_kwargs.alpha=2", "+reward_model.reward_kwargs.beta=3"])
    assert cfg.reward_model.reward_kwargs.alpha == 2 and cfg.reward_model.reward_kwargs.beta == 3
    with pytest.raises(ConfigError, match="'\\+my_plugin.setting': rlcore has no such key"):
        load_config(overrides=["+my_plugin.setting=3"])


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
        (
            "data:\n  train_batch_sise: 8\n",
            "unknown config key 'data.train_batch_sise'. Did you mean 'data.train_batch_size'?",
        ),
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
        (
            ["data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=8"],
            "must not exceed data.train_batch_size",
        ),
        (
            [
                "data.train_batch_size=8",
                "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",
            ],
            "must be divisible by actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu (3)",
        ),
        (
            [
                "data.train_batch_size=3",
                "actor_rollout_ref.actor.ppo_mini_batch_size=3",
                "trainer.n_gpus_per_node=2",
                "trainer.executor=ray",
            ],
            "cannot be split evenly over 2 data-parallel ranks",
        ),
        (["trainer.n_gpus_per_node=2", "trainer.executor=local"], "trainer.executor=local runs a single process"),
        (["trainer.executor=slurm"], "trainer.executor must be 'auto', 'local' or 'ray'"),
        (["data.truncation=sideways"], "data.truncation must be one of left, right, middle, error"),
        (["actor_rollout_ref.rollout.n=0"], "actor_rollout_ref.rollout.n must be a positive integer"),
    ],
)
def test_batch_arithmetic_is_checked_before_anything_starts(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        derive_quantities(load_config(overrides=overrides))
    assert message in str(info.value)


def test_derived_quantities_without_micro_batch() -> None:
    derived = derive_quantities(
        load_config(
            overrides=[
                "data.train_batch_size=16",
                "actor_rollout_ref.rollout.n=8",
                "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            ]
        )
    )
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
    result = CliRunner().invoke(
        cli,
        [
            "run",
            "--dry-run",
            "data.train_files=x.parquet",
            "actor_rollout_ref.model.path=m",
            "algorithm.adv_estimator=grpo",
            "data.train_batch_size=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "prompts per step: 8 x n=1 -> 8 responses" in result.output
    assert "mini-batches per step: 2 x 1 epoch(s)" in result.output


# ------------------------------------------------------------------------- verl command lines
def dry_run(*args: str) -> Any:
    """``rlcore run --dry-run`` with a model and data path, plus ``args``."""
    return runs.dry_run(
        "data.train_files=x.parquet",
        "actor_rollout_ref.model.path=m",
        "data.train_batch_size=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        *args,
    )


def test_three_bad_keys_print_three_errors() -> None:
    result = dry_run("data.train_batch_sise=8", "trainer.total_epochs=2.5", "actor_rollout_ref.actor.optim.lrr=1")
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 3, result.output
    assert any("Did you mean 'data.train_batch_size'?" in e for e in errors)
    assert any("trainer.total_epochs=2.5 has the wrong type" in e for e in errors)
    assert any("Did you mean 'actor_rollout_ref.actor.optim.lr'?" in e for e in errors)
    assert "3 problems found" in result.output


def test_all_problems_are_raised_together() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["a.b=1", "data.train_batch_size=x", "trainer.logger"])
    assert len(info.value.problems) == 3


def test_the_dry_run_also_reports_components_and_batch_sizes_with_key_errors() -> None:
    result = dry_run("algorithm.adv_estimator=nope", "actor_rollout_ref.rollout.n=0", "data.nope=1")
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 3, result.output
    assert any(e.startswith("error: algorithm.adv_estimator=nope: unknown advantage_estimator") for e in errors)


@pytest.mark.parametrize(
    ("overrides", "executor"),
    [
        ([], "local"),
        (["trainer.n_gpus_per_node=8"], "ray"),
        (["trainer.nnodes=2"], "ray"),
        (["trainer.placement=split"], "ray"),
        (["trainer.n_gpus_per_node=8", "trainer.executor=local"], "local"),
    ],
)
def test_executor_auto_is_local_for_one_rank_and_ray_otherwise(overrides: list[str], executor: str) -> None:
    assert load_config(overrides=overrides).trainer.executor == executor


def test_verl_spellings_are_aliases() -> None:
    cfg = load_config(
        overrides=[
            "critic.model.fsdp_config.param_offload=true",
            "data.trust_remote_code=true",
            "actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=0",
        ]
    )
    assert cfg.critic.fsdp_config.param_offload is True
    assert cfg.actor_rollout_ref.model.trust_remote_code is True
    assert cfg.actor_rollout_ref.rollout.vllm.engine_kwargs.swap_space == 0
    assert "model" not in cfg.critic or "fsdp_config" not in cfg.critic.model


def test_aliases_in_files_and_conflicting_spellings(tmp_path: Path) -> None:
    path = tmp_path / "verl.yaml"
    path.write_text("critic:\n  model:\n    fsdp_config:\n      optimizer_offload: true\n")
    assert load_config(files=[str(path)]).critic.fsdp_config.optimizer_offload is True
    with pytest.raises(ConfigError, match="set the same key .critic.fsdp_config.param_offload. to different values"):
        load_config(overrides=["critic.fsdp_config.param_offload=true", "critic.model.fsdp_config.param_offload=false"])


def test_config_show_marks_the_verl_spellings() -> None:
    result = CliRunner().invoke(cli, ["config", "show", "data.train_files=x.parquet"])
    assert result.exit_code == 0, result.output
    assert "  fsdp_config:  # verl: critic.model.fsdp_config" in result.output
    assert "trust_remote_code: false  # verl: data.trust_remote_code" in result.output


def test_types_as_verl_accepts_them() -> None:
    cfg = load_config(
        overrides=[
            "trainer.logger=console",
            "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
            "actor_rollout_ref.actor.optim.lr=1",
        ]
    )
    assert list(cfg.trainer.logger) == ["console"]
    assert cfg.actor_rollout_ref.rollout.val_kwargs.temperature == 1.0
    assert cfg.actor_rollout_ref.actor.optim.lr == 1


def test_missing_verl_features_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the Megatron plugin (disabled here) its keys name the plugin to install; features rlcore lacks
    are named as such."""
    from rlcore.plugins import make_plugin_manager

    monkeypatch.setenv("RLCORE_DISABLE_PLUGINS", "rlcore-plugin-megatron")
    without_megatron = make_plugin_manager()
    with pytest.raises(ConfigError) as info:
        load_config(
            overrides=[
                "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2",
                "global_profiler.global_tool_config.nsys.discrete=true",
                "reward_model.ulysses_sequence_parallel_size=2",
            ],
            manager=without_megatron,
        )
    problems = info.value.problems
    assert len(problems) == 3, problems
    assert "pipeline_model_parallel_size: verl's Megatron backend settings" in problems[0]
    assert "pip install rlcore-plugin-megatron" in problems[0]
    assert "global_profiler.global_tool_config.nsys.discrete: Nsight/NPU profiling" in problems[1]
    assert "reward_model.ulysses_sequence_parallel_size: these reward-model options of verl" in problems[2]


@pytest.mark.parametrize(
    "override", ["global_profiler.tool=torch", "actor_rollout_ref.ref.profiler.tool_config.torch.discrete=true"]
)
def test_a_key_of_a_disabled_plugin_names_the_plugin(monkeypatch: pytest.MonkeyPatch, override: str) -> None:
    """rlcore-plugin-profiler installed but disabled: a key it declares is one problem naming the key and the
    distribution (not the generic unknown-key error); its keys are not in the config, and features rlcore
    lacks are still named as such."""
    from rlcore.config.loader import default_config
    from rlcore.plugins import make_plugin_manager

    monkeypatch.setenv("RLCORE_DISABLE_PLUGINS", "rlcore-plugin-profiler")
    without_profiler = make_plugin_manager()
    assert "global_profiler" not in default_config(without_profiler)
    with pytest.raises(ConfigError) as info:
        load_config(
            overrides=[override, "global_profiler.global_tool_config.nsys.discrete=true"], manager=without_profiler
        )
    key = override.split("=")[0]
    assert info.value.problems == [
        f"command line: config key {key!r} is a key of rlcore-plugin-profiler, which is installed but did not load "
        "(disabled or failed: see `rlcore plugins`)",
        "command line: global_profiler.global_tool_config.nsys.discrete: Nsight/NPU profiling options and verl's "
        "older profiler keys (rlcore profiles with global_profiler.tool=torch, torch_memory, nsys, whose NVTX "
        "ranges need the run launched under nsys, or npu, recorded by torch.profiler): docs/profiling.md",
    ]


def test_megatron_settings_rlcore_lacks_do_not_ask_to_install_the_installed_plugin() -> None:
    pytest.importorskip("rlcore_plugin_megatron")
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["actor_rollout_ref.actor.megatron.override_ddp_config.grad_reduce_in_fp32=true"])
    (problem,) = info.value.problems
    assert "rlcore-plugin-megatron is installed but does not support these settings yet" in problem
    assert "pip install" not in problem


def test_keys_of_missing_features_are_accepted_when_they_turn_it_off() -> None:
    load_config(
        overrides=[
            "actor_rollout_ref.rollout.multi_turn.enable=false",
            "global_profiler.tool=null",
            "actor_rollout_ref.actor.profiler.enable=False",
        ]
    )
    with pytest.raises(ConfigError, match="multi-turn settings other than verl's core keys"):
        load_config(overrides=["actor_rollout_ref.rollout.multi_turn.use_inference_chat_template=true"])


def test_verls_fsdp2_engine_strategy_is_what_rlcore_runs() -> None:
    """verl's one-step-off scripts set ``fsdp_config.strategy=fsdp2``: rlcore's FSDP engine is FSDP2; FSDP1 is not."""
    load_config(overrides=["actor_rollout_ref.actor.fsdp_config.strategy=fsdp2", "critic.fsdp_config.strategy=fsdp2"])
    with pytest.raises(ConfigError, match="actor_rollout_ref.actor.fsdp_config.strategy: these FSDP options of verl"):
        load_config(overrides=["actor_rollout_ref.actor.fsdp_config.strategy=fsdp"])
    with pytest.raises(ConfigError, match="fsdp_turbo"):
        load_config(
            overrides=[
                "actor_rollout_ref.actor.strategy=fsdp_turbo",
                "actor_rollout_ref.actor.fsdp_config.strategy=fsdp2",
            ]
        )


@pytest.mark.parametrize(
    "args",
    [
        ["--config-name=ppo_trainer"],
        ["--config-path", "config", "--config-name", "ppo_trainer.yaml"],
        ["-cn", "ppo_trainer"],
    ],
)
def test_verls_config_names(args: list[str]) -> None:
    line = parse_command_line([*args, "data.train_files=x"])
    assert line.overrides == ["data.train_files=x"]
    cfg = load_config(line.files, line.overrides, config_name=line.config_name, config_path=line.config_path)
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp"


def test_ppo_megatron_trainer_selects_the_megatron_engine() -> None:
    cfg = load_config(config_name="ppo_megatron_trainer", config_path="config")
    assert cfg.actor_rollout_ref.actor.strategy == "megatron" and cfg.critic.strategy == "megatron"
    if not load_plugins().registry.has("training_backend", "megatron"):
        result = dry_run("--config-name=ppo_megatron_trainer")
        assert result.exit_code == 2
        assert "actor_rollout_ref.actor.strategy=megatron: unknown training_backend 'megatron'" in result.output
        assert "pip install rlcore-plugin-megatron" in result.output


def test_config_files_with_a_defaults_list(tmp_path: Path) -> None:
    (tmp_path / "group").mkdir()
    (tmp_path / "group" / "small.yaml").write_text("train_batch_size: 16\nmax_prompt_length: 64\n")
    (tmp_path / "base.yaml").write_text("data:\n  max_prompt_length: 32\ntrainer:\n  total_epochs: 2\n")
    (tmp_path / "run.yaml").write_text(
        "hydra:\n  searchpath:\n    - file://verl/trainer/config\n"
        "defaults:\n  - ppo_trainer\n  - base\n  - group@data: small\n  - _self_\n"
        "trainer:\n  total_epochs: 3\n"
    )
    cfg = load_config(config_name="run", config_path=str(tmp_path))
    assert cfg.trainer.total_epochs == 3, "_self_ comes last"
    assert cfg.data.train_batch_size == 16 and cfg.data.max_prompt_length == 64, "the group entry wins over base"
    (tmp_path / "self_first.yaml").write_text("defaults:\n  - _self_\n  - base\ntrainer:\n  total_epochs: 5\n")
    assert load_config(files=[str(tmp_path / "self_first.yaml")]).trainer.total_epochs == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("defaults:\n  - nowhere\n", "no nowhere.yaml in"),
        ("defaults: ppo_trainer\n", "'defaults' must be a list"),
        ("hydra:\n  run:\n    dir: x\n", "hydra.run: Hydra's own settings have no effect"),
        ("defaults:\n  - override group: x\n", "override/optional entries are not supported"),
    ],
)
def test_bad_defaults_lists_name_the_file(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(config_name="bad", config_path=str(tmp_path))
    assert "bad.yaml" in str(info.value) and message in str(info.value)


def test_unknown_config_name() -> None:
    with pytest.raises(
        ConfigError, match="no my_trainer.yaml in config; without a file, rlcore knows verl's ppo_trainer"
    ):
        load_config(config_name="my_trainer", config_path="config")


@pytest.mark.parametrize("legacy", [3, 4])
def test_dry_run_and_workers_share_the_batch_arithmetic(legacy: int, tiny_model_dir) -> None:
    """The deprecated global ``ppo_micro_batch_size`` on 2 ranks: the dry run and the actor worker compute the
    per-rank sizes with one function, so they accept and reject the same settings with the same message."""
    from rlcore.errors import RLCoreError
    from rlcore.workers.actor import ActorRolloutRefWorker

    config = load_config(
        [],
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            "trainer.n_gpus_per_node=2",
            "trainer.device=cpu",
            "data.train_batch_size=4",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null",
            f"actor_rollout_ref.actor.ppo_micro_batch_size={legacy}",
        ],
        [],
    )
    if legacy % 2:
        with pytest.raises(ConfigError) as dry:
            derive_quantities(config)
        with pytest.raises(RLCoreError) as worker:
            ActorRolloutRefWorker(config, "actor", 0, 2)
        assert str(dry.value) == str(worker.value)
        assert "actor_rollout_ref.actor.ppo_micro_batch_size (3) must be divisible" in str(dry.value)
    else:
        derived = derive_quantities(config)
        assert (derived.responses_per_mini_batch_per_rank, derived.micro_batch_per_rank) == (4, 2)


def test_config_show_prints_what_run_resolves(tmp_path: Path) -> None:
    """``config show --preset dapo`` runs the plugins' ``on_config_resolved`` hooks, as ``rlcore run`` does:
    the printed config equals the resolved one, DAPO's group filter included."""
    import yaml

    from rlcore.config import config_to_yaml

    shown = CliRunner().invoke(cli, ["config", "show", "--preset", "dapo"])
    assert shown.exit_code == 0, shown.output
    printed = yaml.safe_load(shown.output)
    manager = load_plugins()
    config = load_config([], [], ["arith-cpu", "dapo"], manager)
    manager.hook.on_config_resolved(config=config)
    assert printed == yaml.safe_load(config_to_yaml(config))
    assert printed["algorithm"]["batch_filters"], "the dapo preset's on_config_resolved adds its group filter"


def test_min_group_size_is_checked_before_anything_loads() -> None:
    """An estimator that declares ``min_group_size=2`` (grpo_passk) with ``rollout.n=1`` fails in the dry run,
    naming both keys."""
    result = CliRunner().invoke(
        cli, ["run", "--dry-run", "algorithm.adv_estimator=grpo_passk", "actor_rollout_ref.rollout.n=1"]
    )
    assert result.exit_code == 2
    assert "actor_rollout_ref.rollout.n=1: algorithm.adv_estimator=grpo_passk" in result.output
    assert "needs at least 2 per prompt" in result.output


def test_dry_run_asks_the_training_backend_to_check_its_settings() -> None:
    """A setting the backend cannot run (an FSDP dtype it does not know) fails the dry run, naming the key,
    not the start of the workers."""
    result = CliRunner().invoke(cli, ["run", "--dry-run", "actor_rollout_ref.actor.fsdp_config.dtype=fp8"])
    assert result.exit_code == 2
    assert "actor_rollout_ref.actor.fsdp_config.dtype='fp8' is not a dtype" in result.output


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ([], None),
        (["critic.ppo_micro_batch_size_per_gpu=4"], 4),
        (["critic.ppo_micro_batch_size_per_gpu=4", "critic.forward_micro_batch_size_per_gpu=2"], 2),
        (["critic.forward_micro_batch_size=8"], 4),
        (["critic.forward_micro_batch_size=1"], 1),
    ],
)
def test_critic_values_pass_micro_batch(overrides: list[str], expected: int | None) -> None:
    """verl's ``critic.forward_micro_batch_size_per_gpu`` (default: the update's micro-batch) sizes the values
    pass; the deprecated global ``forward_micro_batch_size`` is divided over the data-parallel ranks (here 2)."""
    from rlcore.config.batch_sizes import forward_micro_batch_size
    from rlcore.config.schema import Sections

    critic = Sections.from_tree(load_config(overrides=overrides)).critic
    size = forward_micro_batch_size(critic, "forward_micro_batch_size_per_gpu", "forward_micro_batch_size", 2)
    assert size == expected


def test_critic_values_pass_micro_batch_must_be_positive() -> None:
    """A values micro-batch of 0 is an error naming the key."""
    from rlcore.config.batch_sizes import forward_micro_batch_size
    from rlcore.config.schema import Sections

    critic = Sections.from_tree(load_config(overrides=["critic.forward_micro_batch_size_per_gpu=0"])).critic
    with pytest.raises(Exception, match="critic.forward_micro_batch_size_per_gpu"):
        forward_micro_batch_size(critic, "forward_micro_batch_size_per_gpu", "forward_micro_batch_size", 1)


def test_dynamic_batching_does_not_need_a_dividing_micro_batch() -> None:
    """With ``use_dynamic_bsz`` the token budget forms the micro-batches: a micro-batch size that does not divide
    the per-rank mini-batch is accepted (verl ignores it too); without it, it is an error naming the key."""
    overrides = [
        "data.train_batch_size=8",
        "actor_rollout_ref.rollout.n=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",
    ]
    derive_quantities(load_config(overrides=[*overrides, "actor_rollout_ref.actor.use_dynamic_bsz=true"]))
    with pytest.raises(ConfigError, match="must be divisible by actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"):
        derive_quantities(load_config(overrides=overrides))
