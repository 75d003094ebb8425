"""verl's Megatron-Lite engine as a named substitution (``actor@actor_rollout_ref.actor=mlite_actor`` → rlcore's
Megatron engine): its ``engine.*`` keys with the same meaning mapped onto ``megatron.*``, its speed choices noted, the
rest refused by name (docs/from-verl.md, "verl's VeOmni, TorchTitan, FSDP-Turbo, MindSpeed and Megatron-Lite
engines"), and Hydra's ``hydra.searchpath`` on the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from rlcore_testkit.runs import dry_run, make_tiny_task, tiny_run

from rlcore.config import load_config
from rlcore.config.problems import ConfigError

ACTOR = "actor_rollout_ref.actor"
ENGINE = f"{ACTOR}.engine"
MLITE = "actor@actor_rollout_ref.actor=mlite_actor"
#: metrics that measure time, speed or memory: they differ between any two runs
TIMING = ("timing", "perf/", "actor/weight_sync_s")


def numbers(run_dir: Path) -> list[dict[str, Any]]:
    """The run's metrics.jsonl rows without the timing, speed and memory keys."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith(TIMING)} for row in rows]


def test_megatron_lite_keys_map_onto_the_megatron_engine() -> None:
    config = load_config(
        overrides=[
            MLITE,
            f"{ENGINE}.tp=2",
            f"{ENGINE}.pp=2",
            f"{ENGINE}.vpp=2",
            f"{ENGINE}.cp=2",
            f"{ENGINE}.ep=4",
            f"{ENGINE}.param_offload=true",
            f"{ENGINE}.optimizer_offload=true",
            f"{ENGINE}.grad_offload=true",
            f"{ENGINE}.attention_backend_override=flash",
            f"{ENGINE}.impl_cfg.use_thd=true",
            f"+{ENGINE}.impl_cfg.optimizer=fsdp2",
            f"+{ENGINE}.impl_cfg.recompute=[full]",
        ]
    )
    actor = config.actor_rollout_ref.actor
    megatron = actor.megatron
    assert actor.strategy == "megatron"
    sizes = (
        megatron.tensor_model_parallel_size,
        megatron.pipeline_model_parallel_size,
        megatron.virtual_pipeline_model_parallel_size,
        megatron.context_parallel_size,
        megatron.expert_model_parallel_size,
        megatron.expert_tensor_parallel_size,  # Megatron-Lite's etp default is 1 (megatron-core's null: the tp size)
    )
    assert sizes == (2, 2, 2, 2, 4, 1)
    assert (megatron.param_offload, megatron.optimizer_offload, megatron.grad_offload) == (True, True, True)
    assert config.actor_rollout_ref.model.enable_gradient_checkpointing is True
    # verl's marker and the speed choices are kept for the plan's notes, nothing else
    assert OmegaConf.to_container(actor.engine) == {
        "strategy": "mlite",
        "attention_backend_override": "flash",
        "impl_cfg": {"use_thd": True, "optimizer": "fsdp2"},
    }
    assert "engine" not in config.critic and "engine" not in config.actor_rollout_ref.ref


def test_one_chunk_per_stage_is_no_virtual_pipeline() -> None:
    config = load_config(overrides=[MLITE, f"{ENGINE}.vpp=1", f"{ENGINE}.etp=2", f"+{ENGINE}.impl_cfg.recompute=[]"])
    megatron = config.actor_rollout_ref.actor.megatron
    assert megatron.virtual_pipeline_model_parallel_size is None
    assert megatron.expert_tensor_parallel_size == 2
    assert config.actor_rollout_ref.model.enable_gradient_checkpointing is False


def test_offload_fraction_one_is_the_megatron_optimizer_offload() -> None:
    config = load_config(overrides=[MLITE, f"+{ACTOR}.optim.override_optimizer_config.offload_fraction=1.0"])
    assert config.actor_rollout_ref.actor.megatron.optimizer_offload is True
    kept = load_config(overrides=[MLITE, f"+{ACTOR}.optim.override_optimizer_config.offload_fraction=0"])
    assert kept.actor_rollout_ref.actor.megatron.optimizer_offload is False


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ((f"{ENGINE}.model_name=kimi_k2",), "actor_rollout_ref.actor.engine.model_name"),
        ((f"+{ENGINE}.impl_cfg.cross_entropy_fusion=true",), "actor_rollout_ref.actor.engine.impl_cfg"),
        ((f"{ENGINE}.router_aux_loss_coef=0.01",), "the router's auxiliary-loss coefficient"),
        ((f"{ENGINE}.impl_cfg.use_thd=false",), "Megatron-Lite trains packed (THD) sequences only"),
        ((f"+{ENGINE}.impl_cfg.optimizer=adam",), "Megatron-Lite's optimizer paths are fsdp2 and dist_opt"),
        ((f"+{ENGINE}.impl_cfg.recompute=[moe]",), "Megatron-Lite's selective recompute is not supported"),
        ((f"{ENGINE}.vpp=0",), "actor_rollout_ref.actor.engine.vpp=0"),
        (
            (f"{ENGINE}.strategy=megatron", f"{ENGINE}.tp=2"),
            "engine.tp: a setting of verl's Megatron-Lite engine, read",
        ),
        ((f"+{ACTOR}.optim.override_optimizer_config.offload_fraction=0.5",), "partial optimizer offload"),
    ],
)
def test_megatron_lite_keys_without_an_equal_are_errors_naming_them(overrides: tuple[str, ...], named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace("(", r"\(").replace(")", r"\)")):
        load_config(overrides=[MLITE, *overrides])


@pytest.mark.parametrize(
    ("override", "named"),
    [
        (f"{ENGINE}.tp=2", "actor_rollout_ref.actor.engine.tp: a setting of verl's Megatron-Lite engine"),
        (
            f"+{ACTOR}.optim.override_optimizer_config.offload_fraction=1.0",
            "offload_fraction: Megatron-Lite's offloaded optimizer fraction, read only by its engine",
        ),
    ],
)
def test_megatron_lite_keys_without_its_engine_are_errors(override: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        load_config(overrides=[f"{ACTOR}.strategy=megatron", override])


def test_the_plan_names_the_substitution_and_each_kept_key() -> None:
    result = dry_run(
        MLITE,
        "trainer.n_gpus_per_node=2",
        f"{ENGINE}.tp=2",
        f"{ENGINE}.attention_backend_override=flash",
        f"{ENGINE}.impl_cfg.use_thd=true",
        f"+{ENGINE}.impl_cfg.optimizer=dist_opt",
    )
    assert result.exit_code == 0, result.output
    assert (
        "actor_rollout_ref.actor: verl's Megatron-Lite engine (engine.strategy=mlite): trained by rlcore's Megatron engine"
    ) in result.output
    assert f"{ENGINE}.attention_backend_override=flash: the attention kernel changes speed" in result.output
    assert f"{ENGINE}.impl_cfg.use_thd=True: Megatron-Lite always packs sequences" in result.output
    assert f"{ENGINE}.impl_cfg.optimizer=dist_opt: one data-parallel and one expert-data-parallel rank" in result.output
    assert "data-parallel ranks: 1 (of 2 ranks)" in result.output


def test_model_engine_mlite_names_every_role_in_one_line() -> None:
    """``model_engine=mlite`` chooses Megatron-Lite for the actor, the reference and the critic: one substitution
    line names the three roles; each role's Megatron-Lite keys map onto its own Megatron section."""
    config = load_config(overrides=["model_engine=mlite", "critic.engine.tp=2", "critic.engine.param_offload=true"])
    assert (config.critic.megatron.tensor_model_parallel_size, config.critic.megatron.param_offload) == (2, True)
    result = dry_run("model_engine=mlite", "trainer.n_gpus_per_node=1")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "Megatron-Lite engine" in line]
    assert len(lines) == 1
    assert lines[0].startswith("actor_rollout_ref.actor, actor_rollout_ref.ref, critic: verl's Megatron-Lite engine")


def test_a_sharded_optimizer_over_several_data_parallel_ranks_is_refused() -> None:
    result = dry_run(MLITE, "trainer.n_gpus_per_node=2", f"+{ENGINE}.impl_cfg.optimizer=fsdp2")
    assert result.exit_code == 2, result.output
    assert (
        "error: actor_rollout_ref.actor.engine.impl_cfg.optimizer=fsdp2: Megatron-Lite shards the optimizer state over "
        "the 2 data-parallel" in result.output
    )
    assert "Traceback" not in result.output


def test_a_plain_megatron_run_prints_no_megatron_lite_line() -> None:
    result = dry_run(f"{ACTOR}.strategy=megatron", "trainer.n_gpus_per_node=1")
    assert result.exit_code == 0, result.output
    assert "Megatron-Lite" not in result.output


def test_hydra_searchpath_on_the_command_line(tmp_path: Path) -> None:
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "mine.yaml").write_text("defaults:\n  - ppo_trainer\n  - _self_\ndata:\n  train_batch_size: 12\n")
    config = load_config(overrides=[f"hydra.searchpath=[file://{folder},pkg://verl_mlite.config]"], config_name="mine")
    assert config.data.train_batch_size == 12
    with pytest.raises(ConfigError, match="hydra.searchpath entry 'pkg://my_package.config': rlcore reads configs"):
        load_config(overrides=["hydra.searchpath=[pkg://my_package.config]"])


def test_a_megatron_lite_run_writes_the_metrics_of_the_same_megatron_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A real run spelled with verl's Megatron-Lite keys and the same run spelled with rlcore's Megatron keys write the
    same metrics.jsonl, timing keys aside."""
    task = make_tiny_task(tmp_path / "task")
    steps = "trainer.total_training_steps=2"
    _, mlite = tiny_run(
        tmp_path / "mlite",
        tiny_model_dir,
        task,
        MLITE,
        steps,
        f"{ENGINE}.param_offload=true",
        f"{ENGINE}.attention_backend_override=flash",
        f"+{ENGINE}.impl_cfg.optimizer=fsdp2",
        f"+{ENGINE}.impl_cfg.recompute=[full]",
        f"+{ACTOR}.optim.override_optimizer_config.offload_fraction=1.0",
    )
    _, megatron = tiny_run(
        tmp_path / "megatron",
        tiny_model_dir,
        task,
        f"{ACTOR}.strategy=megatron",
        steps,
        f"{ACTOR}.megatron.param_offload=true",
        f"{ACTOR}.megatron.optimizer_offload=true",
        f"{ACTOR}.megatron.expert_tensor_parallel_size=1",
        "actor_rollout_ref.model.enable_gradient_checkpointing=true",
    )
    assert numbers(mlite) == numbers(megatron)
    assert len(numbers(mlite)) >= 2
    config = OmegaConf.load(mlite / "config.yaml")
    assert (config.actor_rollout_ref.actor.strategy, config.actor_rollout_ref.actor.engine.strategy) == (
        "megatron",
        "mlite",
    )
