"""verl's one-step-off and fully-async trainers (``verl/experimental/one_step_off_policy`` and
``fully_async_policy``) on rlcore: their config names built in, their top-level ``rollout`` pool on split
placement, ``async_training.partial_rollout`` and ``require_batches`` on ``separate_async``, and a sample of their
scripts, unmodified (tests/verl_async_examples, see the NOTICE there), through ``rlcore run --dry-run``.

The scripts run as ``tests/test_verl010_scripts.py`` runs verl 0.10's (:mod:`tests.verl_scripts_harness`), their
entry point swapped for ``rlcore run``: a script that names no config gets its main's own
(:data:`ENTRY_CONFIGS`), as verl's main would load it.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from rlcore.cli import cli
from rlcore.config import ConfigError, check_values, load_config
from rlcore.config.async_training import PARTIAL_ROLLOUT_ROUNDS, async_plan
from rlcore.config.compose import BUILTIN_CONFIGS
from tests.verl_scripts_harness import (  # noqa: F401 (the fixtures are used by name)
    EXPERIMENTAL_SHIMS,
    localised,
    tiny_task_fixture,
    verl_arguments,
)

EXAMPLES = Path(__file__).parent / "verl_async_examples"
#: verl's mains -> the config each loads when the command line names none
ENTRY_CONFIGS = {
    "verl/experimental/one_step_off_policy/": "one_step_off_ppo_trainer",
    "verl/experimental/fully_async_policy/": "fully_async_ppo_trainer",
}
#: script -> lines its dry run prints (the plan's rollout pool and async mode)
EXPECTED: dict[str, tuple[str, ...]] = {
    "verl/experimental/one_step_off_policy/shell/grpo_0.6b_gsm8k_fsdp2_2_6.sh": (
        "rollout pool: verl's rollout.nnodes=1, rollout.n_gpus_per_node=2 -> trainer.placement=split with "
        "trainer.rollout_n_gpus_per_node=2",
        "async training: separate_async (async_training.enable=true, async_training.max_staleness_steps=1)",
    ),
    "verl/experimental/one_step_off_policy/shell/dapo_7b_math_megatron_4_12.sh": (
        "rollout pool: verl's rollout.nnodes=2, rollout.n_gpus_per_node=2 -> trainer.placement=split with "
        "trainer.rollout_n_gpus_per_node=2 on each of trainer.nnodes=2 node(s)",
        "async training: separate_async (async_training.enable=true",
        "strategy: megatron",
    ),
    # train_batch_size=0: 32 prompts per mini-batch x require_batches 4 x trigger_parameter_sync_step 4 = 512
    "verl/experimental/fully_async_policy/shell/dapo_7b_math_fsdp2_8_8.sh": (
        "rollout pool: verl's rollout.nnodes=1, rollout.n_gpus_per_node=8 -> trainer.placement=split with "
        "trainer.rollout_n_gpus_per_node=8",
        "rollout.total_rollout_steps=51200 prompts -> trainer.total_training_steps=100",
        "async training: separate_async (trainer.v1.trainer_mode=separate_async, async_training.staleness_threshold=0.1",
        "async_training.partial_rollout=true: chunks of data.max_response_length / 4",
    ),
}


def load(*overrides: str, name: str | None = None) -> object:
    """The config of ``overrides`` on verl's config ``name``, with its values checked."""
    config = load_config([], list(overrides), [], config_name=name)
    check_values(config)
    return config


def test_the_table_covers_every_copied_script() -> None:
    assert {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.sh")} == set(EXPECTED)


@pytest.mark.skipif(shutil.which("bash") is None, reason="the scripts are bash scripts")
@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_verl_async_script_dry_run(
    script: str, tmp_path: Path, tiny_model_dir: Path, tiny_task: dict[str, Path]
) -> None:
    arguments = localised(verl_arguments(EXAMPLES, script, tmp_path, EXPERIMENTAL_SHIMS), tiny_model_dir, tiny_task)
    if not any(word.startswith(("--config-name", "-cn")) for word in arguments):
        (entry,) = (name for prefix, name in ENTRY_CONFIGS.items() if script.startswith(prefix))
        arguments = ["--config-name", entry, *arguments]
    result = CliRunner().invoke(cli, ["run", "--dry-run", *arguments])
    assert result.exit_code == 0, result.output
    assert "prompts per step:" in result.output
    for line in EXPECTED[script]:
        assert line in result.output, result.output


def test_verl_one_step_off_configs_are_built_in() -> None:
    """verl's one_step_off_ppo_trainer: one batch ahead on the rollout's own pool, the engine's log-probs and
    bypass mode; its _megatron_ variant on the Megatron engine."""
    for name, strategy in (("one_step_off_ppo_trainer", "fsdp"), ("one_step_off_ppo_megatron_trainer", "megatron")):
        config = load("rollout.n_gpus_per_node=1", name=name)
        assert config.async_training.enable is True
        assert (config.trainer.placement, config.trainer.rollout_n_gpus_per_node) == ("split", 1)
        assert config.trainer.executor == "ray"
        assert config.actor_rollout_ref.rollout.calculate_log_probs is True
        assert config.algorithm.rollout_correction.bypass_mode is True
        assert config.actor_rollout_ref.actor.strategy == strategy
        assert config.trainer.v1.trainer_mode == "sync"


def test_verl_fully_async_configs_are_built_in() -> None:
    """verl's fully_async_ppo_trainer: V1's separate_async with verl's async_training defaults (a tenth of a
    batch ahead, 4 mini-batches per sync, partial rollout) and 100 prompts in all."""
    for name, strategy in (("fully_async_ppo_trainer", "fsdp"), ("fully_async_ppo_megatron_trainer", "megatron")):
        config = load(
            "rollout.n_gpus_per_node=1",
            "data.train_batch_size=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "data.max_response_length=10",
            name=name,
        )
        assert config.trainer.v1.trainer_mode == "separate_async"
        assert (config.trainer.placement, config.trainer.rollout_n_gpus_per_node) == ("split", 1)
        assert config.trainer.total_training_steps == 100 // 8
        assert config.actor_rollout_ref.actor.strategy == strategy
        plan = async_plan(config)
        assert plan is not None and plan.lane
        assert (plan.ahead, plan.chunk) == (math.ceil(0.1 * 8), math.ceil(10 / PARTIAL_ROLLOUT_ROUNDS))
    assert set(BUILTIN_CONFIGS) >= {name.replace("_megatron", "") for name in BUILTIN_CONFIGS}


def test_an_unknown_config_name_lists_the_built_in_ones() -> None:
    with pytest.raises(ConfigError, match="no fully_async_dapo_trainer.yaml .*fully_async_ppo_megatron_trainer"):
        load_config([], [], [], config_name="fully_async_dapo_trainer")


def test_the_rollout_pool_is_split_placement() -> None:
    """rollout.nnodes > 0 is the rollout's own GPUs: split placement with rollout.n_gpus_per_node per node, on Ray;
    actor_rollout_ref.hybrid_engine=false then means what it means in verl."""
    config = load("rollout.nnodes=1", "rollout.n_gpus_per_node=3", "actor_rollout_ref.hybrid_engine=false")
    assert (config.trainer.placement, config.trainer.rollout_n_gpus_per_node, config.trainer.executor) == (
        "split",
        3,
        "ray",
    )
    colocated = load("rollout.nnodes=0", "rollout.n_gpus_per_node=3")
    assert (colocated.trainer.placement, colocated.trainer.rollout_n_gpus_per_node) == ("colocated", 1)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["rollout.nnodes=2", "rollout.n_gpus_per_node=2"],
            r"rollout.nnodes=2 with trainer.nnodes=1: rlcore's split placement puts the rollout's GPUs on the "
            r"trainer's nodes .* set rollout.nnodes to trainer.nnodes",
        ),
        (["rollout.nnodes=1", "rollout.n_gpus_per_node=0"], r"rollout.nnodes=1 needs rollout.n_gpus_per_node ≥ 1"),
        (["rollout.nnodes=-1"], r"rollout.nnodes must be"),
        (["rollout.total_rollout_steps=0"], r"rollout.total_rollout_steps must be"),
        (
            ["actor_rollout_ref.hybrid_engine=false"],
            r"actor_rollout_ref.hybrid_engine=False is not supported: .* set trainer.placement=split",
        ),
    ],
)
def test_a_bad_rollout_pool_names_the_keys(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(*overrides)


def test_total_rollout_steps_bounds_the_steps() -> None:
    """verl's rollouter stops after rollout.total_rollout_steps prompts: that many prompts' steps, at most the
    steps asked for."""
    assert load("rollout.total_rollout_steps=20", "data.train_batch_size=4").trainer.total_training_steps == 5
    config = load("rollout.total_rollout_steps=20", "data.train_batch_size=4", "trainer.total_training_steps=3")
    assert config.trainer.total_training_steps == 3


FULLY_ASYNC = (
    "rollout.nnodes=1",
    "rollout.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.calculate_log_probs=true",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
)


def test_verl_fully_async_keys_select_separate_async_and_size_its_batch() -> None:
    """verl's fully-async keys are read only by its fully-async trainer (V1's separate_async): they select it;
    data.train_batch_size=0 is the prompts between weight syncs, trigger × require_batches mini-batches."""
    config = load(
        *FULLY_ASYNC,
        "data.train_batch_size=0",
        "async_training.trigger_parameter_sync_step=2",
        "async_training.require_batches=3",
    )
    assert config.trainer.v1.trainer_mode == "separate_async"
    assert config.data.train_batch_size == 2 * 3 * 2
    with pytest.raises(
        ConfigError,
        match=r"async_training.trigger_parameter_sync_step × async_training.require_batches=6: verl's "
        r"separate_async needs data.train_batch_size = .* \(8 != 6 × 2\)",
    ):
        load(
            *FULLY_ASYNC,
            "data.train_batch_size=8",
            "async_training.trigger_parameter_sync_step=2",
            "async_training.require_batches=3",
        )
    with pytest.raises(ConfigError, match=r"async_training.require_batches must be a positive integer"):
        load(*FULLY_ASYNC, "async_training.require_batches=0")
    one_step_off = load(*FULLY_ASYNC, "async_training.enable=true")
    assert one_step_off.trainer.v1.trainer_mode == "sync"


def test_partial_rollout_is_rlcores_partial_rollout_in_separate_async() -> None:
    """async_training.partial_rollout=true: responses in flight at a weight sync continue under the new weights,
    cut at chunk boundaries (trainer.v1.partial_rollout_tokens, else a quarter of the response length)."""
    base = (
        *FULLY_ASYNC,
        "async_training.trigger_parameter_sync_step=2",
        "data.train_batch_size=4",
        "data.max_response_length=9",
    )
    on = async_plan(load(*base, "async_training.partial_rollout=true"))
    off = async_plan(load(*base, "async_training.partial_rollout=false"))
    given = async_plan(load(*base, "async_training.partial_rollout=true", "trainer.v1.partial_rollout_tokens=5"))
    assert on is not None and off is not None and given is not None
    assert (on.chunk, off.chunk, given.chunk) == (3, 0, 5)
    assert "async_training.partial_rollout=true" in on.source
    with pytest.raises(ConfigError, match=r"async_training.partial_rollout is verl's fully-async trainer's key"):
        load("async_training.partial_rollout=true")
    with pytest.raises(ConfigError, match=r"async_training.partial_rollout=true: multi-turn agent loops"):
        load(*base, "async_training.partial_rollout=true", "actor_rollout_ref.rollout.multi_turn.enable=true")
