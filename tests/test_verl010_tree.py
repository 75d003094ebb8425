"""verl 0.10's config tree beside 0.9's: the ``model_engine`` group, the ``reward`` section, the critic's
``fsdp`` section and the reference model's own settings — dry runs, ``rlcore config show`` marks and one real
run spelled the verl 0.10 way."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from omegaconf import OmegaConf

from rlcore.cli import cli
from rlcore.testing import runs
from rlcore.testing.runs import make_tiny_task, tiny_run

BASE = ("data.train_files=x.parquet", "actor_rollout_ref.model.path=m")


def shown(*args: str) -> OmegaConf:
    """The config ``rlcore config show`` prints for ``args``."""
    result = CliRunner().invoke(cli, ["config", "show", *BASE, *args])
    assert result.exit_code == 0, result.output
    return OmegaConf.create(result.output)


@pytest.mark.parametrize(
    ("args", "actor", "ref", "critic"),
    [
        (("model_engine=megatron",), "megatron", "megatron", "megatron"),
        (("actor_rollout_ref.actor.model_engine=megatron",), "megatron", "megatron", "megatron"),
        (("actor_rollout_ref.actor.strategy=deepspeed", "model_engine=dp"), "deepspeed", "deepspeed", "deepspeed"),
        (("model_engine=dp",), "fsdp", "fsdp", "fsdp"),
        (("actor@actor_rollout_ref.actor=megatron_actor", "critic@critic=dp_critic"), "megatron", "megatron", "fsdp"),
    ],
)
def test_model_engine_selects_the_engine_defaults(args: tuple[str, ...], actor: str, ref: str, critic: str) -> None:
    """The engine group picks defaults below every override: an explicit strategy wins, wherever it stands."""
    config = shown(*args)
    assert config.actor_rollout_ref.actor.strategy == actor
    assert config.actor_rollout_ref.ref.strategy == ref
    assert config.critic.strategy == critic


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("model_engine=veomni", "model_engine=veomni: verl's VeOmni engine is not in rlcore"),
        ("model_engine=torchtitan", "verl's TorchTitan engine is not in rlcore"),
        ("actor@actor_rollout_ref.actor=mlite_actor", "verl's Megatron-Lite engine is not in rlcore"),
        ("actor@actor_rollout_ref.actor=dp_critic", "verl's options of this group end in '_actor'"),
        (
            "actor_rollout_ref.actor.engine.tp=2",
            "verl's Megatron-Lite engine (actor@actor_rollout_ref.actor=mlite_actor)",
        ),
        ("actor_rollout_ref.ref.strategy=deepspeed", "actor_rollout_ref.ref.strategy='deepspeed' differs from"),
        ("ref@actor_rollout_ref.ref=megatron_ref", "actor_rollout_ref.ref.strategy='megatron' differs from"),
    ],
)
def test_what_rlcore_cannot_honour_is_named(arg: str, message: str) -> None:
    result = runs.dry_run(*BASE, arg)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_reward_section_maps_onto_rlcores_reward_settings() -> None:
    config = shown(
        "reward.reward_manager.name=dapo",
        "reward.num_workers=3",
        "reward.custom_reward_function.name=my_score",
        "reward.reward_model.enable=true",
        "reward.reward_model.model_path=/models/rm",
        "reward.reward_model.rollout.response_length=64",
        "critic.fsdp.param_offload=true",
    )
    assert config.reward_model.reward_manager == "dapo"
    assert config.reward_model.scorer_workers == 3
    assert config.custom_reward_function.name == "my_score"
    assert config.reward_model.enable is True
    assert config.reward_model.model.path == "/models/rm"
    assert config.reward_model.rollout.response_length == 64
    assert config.critic.fsdp_config.param_offload is True


def test_both_spellings_with_different_values_name_both_keys() -> None:
    result = runs.dry_run(*BASE, "reward_model.reward_manager=naive", "reward.reward_manager.name=dapo")
    assert result.exit_code == 2
    (line,) = [x for x in result.output.splitlines() if "set the same key (reward_model.reward_manager)" in x]
    assert "reward_model.reward_manager='naive'" in line and "reward.reward_manager.name='dapo'" in line
    same = runs.dry_run(*BASE, "reward_model.scorer_workers=3", "reward.num_workers=3")
    assert "set the same key" not in same.output


def test_config_show_marks_the_verl010_spellings() -> None:
    result = CliRunner().invoke(cli, ["config", "show", *BASE])
    lines = result.output.splitlines()
    assert any("scorer_workers: 8  # verl: reward_model.num_workers; verl 0.10: reward.num_workers" in x for x in lines)
    assert any(x.startswith("custom_reward_function:  # verl 0.10: reward.custom_reward_function") for x in lines)
    assert any("fsdp_config:  # verl: critic.model.fsdp_config; verl 0.10: critic.fsdp" in x for x in lines)


def test_reference_settings_apart_from_the_actors() -> None:
    """The reference compiles as the actor does unless set on its own; ``fsdp2`` names the actor's backend."""
    assert shown("actor_rollout_ref.actor.use_torch_compile=true").actor_rollout_ref.ref.use_torch_compile is True
    config = shown(
        "actor_rollout_ref.actor.use_torch_compile=true",
        "actor_rollout_ref.ref.fsdp_config.use_torch_compile=false",
        "actor_rollout_ref.ref.strategy=fsdp2",
    )
    assert config.actor_rollout_ref.ref.use_torch_compile is False
    assert config.actor_rollout_ref.actor.use_torch_compile is True
    result = runs.dry_run(
        *BASE, "actor_rollout_ref.ref.strategy=fsdp2", "actor_rollout_ref.ref.entropy_checkpointing=true"
    )
    assert result.exit_code == 0, result.output
    assert "note: actor_rollout_ref.ref.entropy_checkpointing=True changes nothing in rlcore" in result.output


def test_a_run_spelled_the_verl010_way(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two real steps with ``model_engine=dp``, the ``reward.*`` section and a reference model whose chunking
    switch differs from the actor's."""
    task = make_tiny_task(tmp_path / "task")
    last, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "model_engine=dp",
        "reward.reward_manager.name=naive",
        "reward.num_workers=2",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "actor_rollout_ref.ref.entropy_from_logits_with_chunking=true",
    )
    assert last["training/global_step"] == 2
    assert math.isfinite(last["actor/pg_loss"]) and math.isfinite(last["actor/kl_loss"])
    saved = OmegaConf.load(next(run_dir.glob("config*.yaml")))
    assert saved.actor_rollout_ref.actor.strategy == "fsdp"
    assert saved.reward_model.scorer_workers == 2
