"""verl 0.10's config tree beside 0.9's: the ``model_engine`` group, the ``reward`` section, the critic's
``fsdp`` section and the reference model's own settings — dry runs, ``rlcore config show`` marks and one real
run spelled the verl 0.10 way; and verl 0.10's other new keys: accepted at the value that turns their feature off,
otherwise an error naming the feature."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from omegaconf import OmegaConf
from rlcore_testkit import runs
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.cli import cli

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
        (
            "model_engine=veomni actor_rollout_ref.actor.veomni.expert_parallel_size=2",
            "rlcore's FSDP engine (which trains model_engine=veomni here) has no equal for: expert parallelism",
        ),
        ("model_engine=automodel", "verl's NeMo AutoModel engine is not in rlcore"),
        (
            "model_engine=torchtitan actor_rollout_ref.actor.torchtitan.pipeline_parallel_size=2",
            "rlcore's FSDP engine (which trains model_engine=torchtitan here) has no equal for: tensor, pipeline",
        ),
        (
            "actor@actor_rollout_ref.actor=mlite_actor actor_rollout_ref.actor.engine.model_name=kimi",
            "rlcore's Megatron engine (which trains mlite_actor here) has no equal for",
        ),
        ("actor@actor_rollout_ref.actor=dp_critic", "verl's options of this group end in '_actor'"),
        (
            "actor_rollout_ref.actor.engine.tp=2",
            "actor_rollout_ref.actor.engine.tp: a setting of verl's Megatron-Lite engine, read only when the role",
        ),
        ("actor_rollout_ref.ref.strategy=deepspeed", "actor_rollout_ref.ref.strategy='deepspeed' differs from"),
        ("ref@actor_rollout_ref.ref=megatron_ref", "actor_rollout_ref.ref.strategy='megatron' differs from"),
        ("trainer.use_v1=false", "trainer.use_v1: verl's legacy trainer"),
        ("trainer.v1.separate_async.hybrid_rollout.enable_switch=true", "verl's V1 hybrid rollout switch"),
        ("trainer.v1.sampler.custom_sampler.name=mine", "verl's V1 custom samplers"),
        ("skip.rollout_tq.enable=true", "skip.rollout_tq.enable: replaying dumped rollouts of verl's TransferQueue"),
        ("actor_rollout_ref.rollout.nnodes=1", "rlcore: trainer.placement=split with trainer.rollout_n_gpus_per_node"),
        ("actor_rollout_ref.rollout.disaggregation.enabled=true", "prefill/decode disaggregated serving"),
        ("reward.reward_model.rollout.full_determinism=true", "batch-invariant deterministic inference"),
        ("reward.reward_model.rollout.temperature=0.7", "rlcore's judge decodes greedily"),
        ("actor_rollout_ref.actor.qat.enable=true", "quantization-aware training"),
        (
            "critic.fsdp.turbo_config.distributed.tensor_parallel_size=2",
            "verl's FSDP-Turbo settings that rlcore's FSDP engine (which trains strategy=fsdp_turbo here)",
        ),
        (
            "actor_rollout_ref.actor.pad_to_length=true",
            "actor_rollout_ref.actor.pad_to_length=true pads packed micro-batches: it needs "
            "actor_rollout_ref.model.use_remove_padding=true",
        ),
        (
            "critic.fsdp.pad_to_length=true critic.fsdp.pad_to_length_bucket=0 critic.model.use_remove_padding=true "
            "algorithm.adv_estimator=gae",
            "critic.pad_to_length_bucket must be a positive integer, got 0",
        ),
        ("actor_rollout_ref.actor.megatron.pad_to_length=true", "verl's Megatron backend settings"),
        ("critic.optim.zero_indexed_step=false", "a one-indexed learning-rate schedule"),
        ("actor_rollout_ref.actor.checkpoint.strict=false", "has no effect on the FSDP engine"),
        ("actor_rollout_ref.actor.policy_loss.dro_beta=0.1", "the DRO policy loss"),
        ("algorithm.filter_groups.max_inflight_gen_batches=2", "rlcore generates one round at a time"),
        ("data.function_tool_path=tools.py", "tools defined as Python functions"),
        ("data.audio_key=sound", "audio input and extra multimodal processor arguments"),
        (
            "data.continuous_token.enable=true data.continuous_token.model_family=deepseekv4",
            "data.continuous_token.enable, data.continuous_token.model_family: verl v0.9's continuous-token prompts",
        ),
        ("critic.model.use_fused_kernels=true", "these model options of verl on the critic"),
        ("critic.model.mtp.enable=true", "multi-token prediction (MTP)"),
        ("actor_rollout_ref.rollout.moe_load_balance_metrics_interval=10", "MoE load-balance metrics"),
        ("global_profiler.global_tool_config.precision_debugger.config_path=c.json", "msprobe's precision debugger"),
    ],
)
def test_what_rlcore_cannot_honour_is_named(arg: str, message: str) -> None:
    result = runs.dry_run(*BASE, *arg.split(" "))
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


#: verl 0.10 keys set to the value that asks for what rlcore does (verl's defaults, or the judge's greedy decoding)
OFF_VALUES = (
    "trainer.use_v1=true",
    "trainer.v1.trainer_mode=sync",
    "trainer.v1.sampler.custom_sampler.path=null",
    "skip.rollout.enable=false",
    "skip.async_rollout.enable=false",
    "actor_rollout_ref.rollout.nnodes=0",
    "actor_rollout_ref.rollout.disaggregation.enabled=false",
    "actor_rollout_ref.rollout.full_determinism=false",
    "actor_rollout_ref.rollout.moe_load_balance_metrics_interval=0",
    "actor_rollout_ref.rollout.multi_turn.function_tool_path=null",
    "actor_rollout_ref.actor.qat.enable=false",
    "actor_rollout_ref.actor.fsdp_config.qat.enable=false",
    "critic.fsdp.qat.enable=false",
    "actor_rollout_ref.actor.fsdp_config.pad_to_length=false",
    "critic.fsdp.pad_to_length=false",
    "actor_rollout_ref.actor.optim.zero_indexed_step=true",
    "critic.optim.zero_indexed_step=true",
    "actor_rollout_ref.actor.checkpoint.strict=true",
    "actor_rollout_ref.actor.policy_loss.dro_beta=null",
    "algorithm.filter_groups.max_inflight_gen_batches=1",
    "data.audio_key=audios",
    "data.mm_processor_kwargs={}",
    "critic.model.use_liger=false",
    "reward.reward_model.rollout.do_sample=false",
    "reward.reward_model.rollout.n=1",
    "reward.reward_model.rollout.disaggregation.enabled=false",
)


def test_verl010_keys_at_their_off_value_are_accepted() -> None:
    """Each key is accepted at the value that turns its feature off in verl, and adds nothing to the config."""
    result = runs.dry_run(*BASE, *OFF_VALUES)
    assert result.exit_code == 0, result.output
    config = shown(*OFF_VALUES)
    assert "rollout_tq" not in config.skip and "custom_sampler" not in config.trainer.v1.sampler
    assert "qat" not in config.actor_rollout_ref.actor


def test_pad_to_length_spellings_reach_each_role() -> None:
    """verl's ``<role>.pad_to_length`` and the engine sections' ``fsdp_config``/``fsdp``/``veomni`` spellings set
    the role's ``pad_to_length`` and bucket; the reference follows the actor unless set (as verl's oc.select)."""
    config = shown(
        "actor_rollout_ref.actor.pad_to_length=true",
        "actor_rollout_ref.actor.fsdp_config.pad_to_length_bucket=256",
        "critic.fsdp.pad_to_length=true",
        "critic.fsdp.pad_to_length_bucket=128",
    )
    actor, ref = config.actor_rollout_ref.actor, config.actor_rollout_ref.ref
    assert (actor.pad_to_length, actor.pad_to_length_bucket) == (True, 256)
    assert (ref.pad_to_length, ref.pad_to_length_bucket) == (True, 256)
    assert (config.critic.pad_to_length, config.critic.pad_to_length_bucket) == (True, 128)
    config = shown("actor_rollout_ref.actor.veomni.pad_to_length=true", "actor_rollout_ref.ref.pad_to_length=false")
    assert config.actor_rollout_ref.actor.pad_to_length and not config.actor_rollout_ref.ref.pad_to_length


def test_entropy_chunk_size_is_a_speed_setting_and_rollout_gpus_per_node_an_alias() -> None:
    """verl 0.10's chunk of chunked entropy changes nothing here (a note; a bad value is still an error), and
    its rollout server's GPUs per node are rlcore's split-placement rollout ranks per node."""
    result = runs.dry_run(*BASE, "actor_rollout_ref.actor.fsdp_config.entropy_from_logits_chunk_size=4096")
    assert result.exit_code == 0, result.output
    assert (
        "note: actor_rollout_ref.actor.entropy_from_logits_chunk_size=4096 changes nothing in rlcore" in result.output
    )
    bad = runs.dry_run(*BASE, "actor_rollout_ref.ref.entropy_from_logits_chunk_size=0")
    assert bad.exit_code == 2
    assert "actor_rollout_ref.ref.entropy_from_logits_chunk_size must be an integer >= 1, got 0" in bad.output
    assert shown("actor_rollout_ref.rollout.n_gpus_per_node=2").trainer.rollout_n_gpus_per_node == 2
