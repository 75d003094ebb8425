"""verl's VeOmni, TorchTitan, FSDP-Turbo and MindSpeed engines as named substitutions (``model_engine=veomni`` and
``=torchtitan`` → rlcore's FSDP engine, ``model_engine=mindspeed`` → rlcore-plugin-megatron), and the engine keys
beside them (docs/from-verl.md, "verl's VeOmni, TorchTitan, FSDP-Turbo, MindSpeed and Megatron-Lite engines")."""

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
#: metrics that measure time, speed or memory: they differ between any two runs
TIMING = ("timing", "perf/", "actor/weight_sync_s")


def errors(result: Any) -> list[str]:
    """The ``error:`` lines of a dry run's output."""
    return [line for line in result.output.splitlines() if line.startswith("error:")]


def assert_refused(result: Any, override: str, named: str) -> None:
    """The dry run failed with an ``error:`` line naming the override's key and ``named``, and no traceback."""
    assert result.exit_code == 2, result.output
    key = override.split("=", 1)[0].lstrip("+")
    assert any(key in line and named in line for line in errors(result)), result.output
    assert "Traceback" not in result.output


def numbers(run_dir: Path) -> list[dict[str, Any]]:
    """The run's metrics.jsonl rows without the timing, speed and memory keys."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith(TIMING)} for row in rows]


def test_veomni_keys_map_onto_the_fsdp_engine() -> None:
    config = load_config(
        overrides=[
            "model_engine=veomni",
            f"{ACTOR}.veomni.param_offload=true",
            f"{ACTOR}.veomni.optimizer_offload=true",
            f"{ACTOR}.veomni.fsdp_size=2",
            f"{ACTOR}.veomni.ulysses_parallel_size=2",
            "actor_rollout_ref.ref.veomni.param_offload=true",
            "critic.veomni.fsdp_size=2",
            f"{ACTOR}.veomni.attn_implementation=flash_attention_2",
        ]
    )
    actor = config.actor_rollout_ref.actor
    assert actor.strategy == "fsdp"
    assert (actor.fsdp_config.param_offload, actor.fsdp_config.optimizer_offload) == (True, True)
    assert (actor.fsdp_config.fsdp_size, actor.ulysses_sequence_parallel_size) == (2, 2)
    assert config.actor_rollout_ref.ref.fsdp_config.param_offload is True
    assert config.critic.fsdp_config.fsdp_size == 2
    # VeOmni's optimizer default: a cosine schedule (its lr_min=0, lr_start=0, lr_decay_ratio=1)
    assert actor.optim.lr_scheduler_type == "cosine" and config.critic.optim.lr_scheduler_type == "cosine"
    # kept as given for the plan note, beside verl's marker of the engine
    assert OmegaConf.to_container(actor.veomni) == {"strategy": "veomni", "attn_implementation": "flash_attention_2"}


def test_verls_per_role_group_selects_the_substitution_for_that_role() -> None:
    config = load_config(overrides=["actor@actor_rollout_ref.actor=veomni_actor"])
    actor = config.actor_rollout_ref.actor
    assert (actor.strategy, actor.optim.lr_scheduler_type, actor.veomni.strategy) == ("fsdp", "cosine", "veomni")
    assert config.critic.optim.lr_scheduler_type == "constant"


def test_a_config_without_veomni_has_no_veomni_section() -> None:
    config = load_config()
    assert "veomni" not in config.actor_rollout_ref.actor and "mindspeed" not in config.actor_rollout_ref.actor
    assert config.actor_rollout_ref.actor.optim.lr_scheduler_type == "constant"


def test_the_plan_names_the_veomni_substitution_and_each_kept_key() -> None:
    result = dry_run(
        "model_engine=veomni",
        f"{ACTOR}.veomni.moe_implementation=fused",
        f"{ACTOR}.veomni.enable_full_shard=true",
        f"{ACTOR}.veomni.expert_parallel_size=1",
    )
    assert result.exit_code == 0, result.output
    assert "model_engine=veomni: trained by rlcore's FSDP engine (VeOmni 0.1.12 is not an rlcore dependency" in (
        result.output
    )
    assert f"{ACTOR}.veomni.moe_implementation=fused changes speed, not the numbers: a kernel choice" in result.output
    assert f"{ACTOR}.veomni.enable_full_shard=True changes speed, not the numbers: VeOmni 0.1.12 reads it nowhere" in (
        result.output
    )


def test_a_plain_fsdp_run_prints_no_substitution() -> None:
    result = dry_run()
    assert result.exit_code == 0, result.output
    assert "model_engine=" not in result.output


def test_a_kept_veomni_key_without_the_engine_is_still_noted() -> None:
    result = dry_run(f"{ACTOR}.veomni.attn_implementation=sdpa")
    assert result.exit_code == 0, result.output
    assert "model_engine=veomni" not in result.output
    assert f"{ACTOR}.veomni.attn_implementation=sdpa changes speed, not the numbers" in result.output


@pytest.mark.parametrize(
    ("override", "named"),
    [
        (f"{ACTOR}.veomni.expert_parallel_size=2", "expert parallelism (expert_parallel_size > 1)"),
        (f"{ACTOR}.veomni.init_device=npu", "init_device=npu"),
        (f"{ACTOR}.veomni.ckpt_manager=dcp", "VeOmni's checkpoint manager"),
        (f"{ACTOR}.veomni.mixed_precision=false", "full bfloat16 training (mixed_precision=false)"),
        (f"{ACTOR}.veomni.strategy=fsdp2", "verl's VeOmni engine settings"),
        (f"{ACTOR}.optim.lr_min=1e-7", "VeOmni's learning-rate schedule other than rlcore's"),
        (f"{ACTOR}.optim.lr_decay_ratio=0.5", "VeOmni's learning-rate schedule other than rlcore's"),
    ],
)
def test_veomni_keys_without_an_equal_are_errors_naming_them(override: str, named: str) -> None:
    assert_refused(dry_run("model_engine=veomni", override), override, named)


#: verl's TorchTitan optimizer at rlcore's constant rate (its default min_lr_factor=0 decays: refused)
CONSTANT = (f"{ACTOR}.optim.min_lr_factor=1.0", "critic.optim.min_lr_factor=1.0")


def test_torchtitan_keys_map_onto_the_fsdp_engine() -> None:
    config = load_config(
        overrides=[
            "model_engine=torchtitan",
            *CONSTANT,
            f"{ACTOR}.torchtitan.param_offload=true",
            f"{ACTOR}.torchtitan.optimizer_offload=true",
            f"{ACTOR}.torchtitan.data_parallel_shard_size=2",
            f"{ACTOR}.torchtitan.full_determinism=true",
            f"{ACTOR}.torchtitan.entropy_from_logits_chunk_size=512",
            f"{ACTOR}.torchtitan.tensor_parallel_size=1",
            f"{ACTOR}.optim.name=AdamW",
            f"{ACTOR}.optim.eps=1e-8",
            "actor_rollout_ref.ref.torchtitan.param_offload=true",
            "critic.torchtitan.data_parallel_shard_size=2",
            f"{ACTOR}.torchtitan.attn_type=varlen",
        ]
    )
    actor = config.actor_rollout_ref.actor
    assert (actor.strategy, config.actor_rollout_ref.ref.strategy, config.critic.strategy) == ("fsdp",) * 3
    assert (actor.fsdp_config.param_offload, actor.fsdp_config.optimizer_offload) == (True, True)
    assert (actor.fsdp_config.fsdp_size, actor.fsdp_config.full_determinism) == (2, True)
    assert actor.entropy_from_logits_chunk_size == 512
    assert config.actor_rollout_ref.ref.fsdp_config.param_offload is True
    assert config.critic.fsdp_config.fsdp_size == 2
    assert actor.optim.lr_scheduler_type == "constant"
    assert OmegaConf.to_container(actor.torchtitan) == {"strategy": "torchtitan", "attn_type": "varlen"}


def test_the_plan_names_the_torchtitan_substitution_and_each_kept_key() -> None:
    result = dry_run(
        "model_engine=torchtitan",
        *CONSTANT,
        f"{ACTOR}.torchtitan.attn_type=flex",
        f"{ACTOR}.torchtitan.spmd_backend=spmd_types",
        f"{ACTOR}.torchtitan.activation_checkpoint=selective",
    )
    assert result.exit_code == 0, result.output
    assert "model_engine=torchtitan: trained by rlcore's FSDP engine (torchtitan 0.3.0 builds its models here but " in (
        result.output
    )
    for key, why in (
        ("attn_type=flex", "TorchTitan's attention kernel"),
        ("spmd_backend=spmd_types", "how TorchTitan types its collectives"),
        ("activation_checkpoint=selective", "a way to recompute activations"),
    ):
        assert f"{ACTOR}.torchtitan.{key} changes speed, not the numbers: {why}" in result.output
    assert "model_engine=veomni" not in result.output


@pytest.mark.parametrize(
    ("override", "named"),
    [
        (f"{ACTOR}.torchtitan.tensor_parallel_size=2", "tensor, pipeline, context and expert parallelism"),
        (f"{ACTOR}.torchtitan.expert_parallel_size=4", "tensor, pipeline, context and expert parallelism"),
        ("critic.torchtitan.data_parallel_replicate_size=2", "replication apart from fsdp_size"),
        (f"{ACTOR}.torchtitan.forward_only=true", "its forward-only switch"),
        (f"{ACTOR}.optim.min_lr_factor=0.0", "a decaying schedule (min_lr_factor < 1"),
        (f"{ACTOR}.optim.decay_type=cosine", "verl's TorchTitan optimizer settings"),
        (f"{ACTOR}.optim.name=Muon", "another optimizer (name)"),
        ("critic.optim.eps=1e-6", "eps other than 1e-8"),
        (f"{ACTOR}.optim.lr_warmup_steps=5", "whose warm-up is not TorchTitan's"),
    ],
)
def test_torchtitan_keys_without_an_equal_are_errors_naming_them(override: str, named: str) -> None:
    assert_refused(dry_run("model_engine=torchtitan", *CONSTANT, override), override, named)


def test_mindspeed_keys_map_onto_the_megatron_engine() -> None:
    config = load_config(
        overrides=[
            "model_engine=mindspeed",
            f"{ACTOR}.mindspeed.tensor_model_parallel_size=2",
            f"{ACTOR}.mindspeed.param_offload=true",
            f"{ACTOR}.mindspeed.strategy=mindspeed_megatron",
            "actor_rollout_ref.ref.mindspeed.context_parallel_size=2",
        ]
    )
    actor = config.actor_rollout_ref.actor
    assert actor.strategy == "megatron"
    assert (actor.megatron.tensor_model_parallel_size, actor.megatron.param_offload) == (2, True)
    assert config.actor_rollout_ref.ref.megatron.context_parallel_size == 2
    assert actor.optim.lr_scheduler_type == "constant"  # MindSpeed keeps verl's Megatron optimizer defaults


def test_the_plan_names_the_mindspeed_substitution() -> None:
    result = dry_run("model_engine=mindspeed", "trainer.n_gpus_per_node=1")
    assert result.exit_code == 0, result.output
    assert "model_engine=mindspeed: trained by rlcore's Megatron engine" in result.output


@pytest.mark.parametrize(
    "override",
    [
        f"{ACTOR}.mindspeed.mcore_kwargs.spec=[mindspeed_llm.tasks.models.spec.qwen3_spec]",
        f"{ACTOR}.mindspeed.strategy=mindspeed_fsdp",
    ],
)
def test_mindspeed_keys_without_an_equal_are_errors_naming_them(override: str) -> None:
    with pytest.raises(ConfigError, match="verl's MindSpeed engine settings that rlcore's Megatron engine"):
        load_config(overrides=["model_engine=mindspeed", override])


def test_use_orig_params_true_is_what_fsdp2_does_and_false_is_refused() -> None:
    assert load_config(overrides=[f"{ACTOR}.fsdp_config.use_orig_params=true"])
    with pytest.raises(ConfigError, match="use_orig_params: these FSDP options of verl"):
        load_config(overrides=[f"{ACTOR}.fsdp_config.use_orig_params=false"])


def test_megatron_engine_keys_of_verl() -> None:
    config = load_config(
        overrides=[
            f"{ACTOR}.strategy=megatron",
            f"{ACTOR}.megatron.use_remove_padding=false",
            f"{ACTOR}.megatron.router_replay.mode=R2",
        ]
    )
    assert config.actor_rollout_ref.actor.router_replay.mode == "R2"
    with pytest.raises(ConfigError, match="use_remove_padding: verl's Megatron backend settings"):
        load_config(overrides=[f"{ACTOR}.strategy=megatron", f"{ACTOR}.megatron.use_remove_padding=true"])


def test_a_veomni_run_writes_the_metrics_of_the_same_fsdp_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A real run spelled with VeOmni's keys and the same run spelled with rlcore's FSDP keys write the same
    metrics.jsonl, timing keys aside (VeOmni's cosine default spelled out for the FSDP run)."""
    task = make_tiny_task(tmp_path / "task")
    _, veomni = tiny_run(
        tmp_path / "veomni",
        tiny_model_dir,
        task,
        "model_engine=veomni",
        f"{ACTOR}.veomni.param_offload=true",
        f"{ACTOR}.veomni.fsdp_size=-1",
        f"{ACTOR}.veomni.attn_implementation=flash_attention_2",
        f"{ACTOR}.veomni.expert_parallel_size=1",
        "actor_rollout_ref.ref.veomni.param_offload=true",
    )
    _, fsdp = tiny_run(
        tmp_path / "fsdp",
        tiny_model_dir,
        task,
        f"{ACTOR}.strategy=fsdp",
        f"{ACTOR}.fsdp_config.param_offload=true",
        f"{ACTOR}.fsdp_config.fsdp_size=-1",
        f"{ACTOR}.optim.lr_scheduler_type=cosine",
        "critic.optim.lr_scheduler_type=cosine",
        "actor_rollout_ref.ref.fsdp_config.param_offload=true",
    )
    assert numbers(veomni) == numbers(fsdp)
    rates = [row["actor/lr"] for row in numbers(veomni) if "actor/lr" in row]
    assert rates[0] > rates[-1]  # the cosine schedule decays


def test_a_torchtitan_run_writes_the_metrics_of_the_same_fsdp_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A real run spelled with verl's TorchTitan keys and the same run spelled with rlcore's FSDP keys write the same
    metrics.jsonl, timing keys aside."""
    task = make_tiny_task(tmp_path / "task")
    _, torchtitan = tiny_run(
        tmp_path / "torchtitan",
        tiny_model_dir,
        task,
        "model_engine=torchtitan",
        *CONSTANT,
        f"{ACTOR}.torchtitan.param_offload=true",
        f"{ACTOR}.torchtitan.data_parallel_shard_size=-1",
        f"{ACTOR}.torchtitan.attn_type=flex",
        f"{ACTOR}.torchtitan.tensor_parallel_size=1",
        f"{ACTOR}.optim.name=AdamW",
        "actor_rollout_ref.ref.torchtitan.param_offload=true",
    )
    _, fsdp = tiny_run(
        tmp_path / "fsdp",
        tiny_model_dir,
        task,
        f"{ACTOR}.strategy=fsdp",
        f"{ACTOR}.fsdp_config.param_offload=true",
        f"{ACTOR}.fsdp_config.fsdp_size=-1",
        "actor_rollout_ref.ref.fsdp_config.param_offload=true",
    )
    assert numbers(torchtitan) == numbers(fsdp)
    assert any("actor/pg_loss" in row for row in numbers(torchtitan))


TURBO = f"{ACTOR}.fsdp_config.turbo_config"


def test_fsdp_turbo_keys_map_onto_the_fsdp_engine() -> None:
    config = load_config(
        overrides=[
            f"{ACTOR}.strategy=fsdp_turbo",
            "actor_rollout_ref.ref.strategy=fsdp_turbo",
            "critic.strategy=fsdp_turbo",
            f"{TURBO}.distributed.fully_shard_parallel_size=2",
            f"{TURBO}.distributed.ulysses_parallel_size=2",
            f"{TURBO}.distributed.fsdp_plan.param_dtype=fp32",
            f"{TURBO}.distributed.fsdp_plan.reduce_dtype=fp32",
            f"{TURBO}.distributed.tensor_parallel_size=1",
            f"+{TURBO}.memory.recompute=true",
            "critic.fsdp_config.turbo_config.distributed.fully_shard_parallel_size=-1",
        ]
    )
    actor = config.actor_rollout_ref.actor
    assert (actor.strategy, config.actor_rollout_ref.ref.strategy, config.critic.strategy) == ("fsdp",) * 3
    assert (actor.fsdp_config.fsdp_size, actor.ulysses_sequence_parallel_size) == (2, 2)
    assert (actor.fsdp_config.dtype, actor.fsdp_config.mixed_precision.reduce_dtype) == ("fp32", "fp32")
    assert config.critic.fsdp_config.fsdp_size == -1
    assert actor.fsdp_config.strategy == "fsdp_turbo"
    assert OmegaConf.to_container(actor.fsdp_config.turbo_config) == {"memory": {"recompute": True}}


def test_the_plan_names_the_fsdp_turbo_substitution_and_each_kept_key() -> None:
    result = dry_run(
        f"{ACTOR}.strategy=fsdp_turbo",
        "actor_rollout_ref.ref.strategy=fsdp_turbo",
        f"{TURBO}.distributed.fsdp_plan.num_to_forward_prefetch=2",
        f"+{TURBO}.distributed.fsdp_plan.hook_modules=['model.layers.{{*}}']",
        f"+{TURBO}.distributed.fsdp_plan.apply_modules={{'model.layers.{{*}}': {{}}, lm_head: {{}}}}",
    )
    assert result.exit_code == 0, result.output
    assert "strategy=fsdp_turbo: trained by rlcore's FSDP engine (verl's FSDP-Turbo is its FSDP engine" in result.output
    assert "(for actor_rollout_ref.actor, actor_rollout_ref.ref)" in result.output
    for key, why in (
        ("distributed.fsdp_plan.num_to_forward_prefetch=2", "how far FSDPTurbo gathers ahead"),
        ("distributed.fsdp_plan.hook_modules=['model.layers.{*}']", "the modules whose hooks FSDPTurbo manages"),
        ("distributed.fsdp_plan.apply_modules=", "the modules FSDPTurbo shards as units"),
    ):
        assert f"{TURBO}.{key}" in result.output and why in result.output, key
    assert not errors(result)


def test_turbo_config_is_read_only_with_fsdp_turbo(tmp_path: Path) -> None:
    """verl's config carries turbo_config under every FSDP role (its defaults: 16 ranks per shard group) and reads it
    only with strategy=fsdp_turbo: so does rlcore, whose fsdp_size it then sets."""
    verl = tmp_path / "verl.yaml"
    verl.write_text(
        "actor_rollout_ref:\n  actor:\n    fsdp_config:\n      fsdp_size: -1\n      turbo_config:\n"
        "        distributed:\n          fully_shard_parallel_size: 16\n          tensor_parallel_size: 1\n"
        "          ulysses_parallel_size: 1\n          fsdp_plan:\n            param_dtype: bf16\n"
        "            num_to_forward_prefetch: 1\n"
    )
    plain = load_config(files=[str(verl)]).actor_rollout_ref.actor
    assert (plain.strategy, plain.fsdp_config.fsdp_size, plain.ulysses_sequence_parallel_size) == ("fsdp", -1, 1)
    turbo = load_config(files=[str(verl)], overrides=[f"{ACTOR}.strategy=fsdp_turbo"]).actor_rollout_ref.actor
    assert (turbo.strategy, turbo.fsdp_config.fsdp_size, turbo.fsdp_config.dtype) == ("fsdp", 16, "bf16")
    assert OmegaConf.to_container(turbo.fsdp_config.turbo_config) == {
        "distributed": {"fsdp_plan": {"num_to_forward_prefetch": 1}}
    }
    with pytest.raises(ConfigError, match="refuses both its context parallelism and verl's Ulysses"):
        load_config(
            overrides=[
                f"{ACTOR}.strategy=fsdp_turbo",
                f"{TURBO}.distributed.ulysses_parallel_size=2",
                f"{ACTOR}.ulysses_sequence_parallel_size=4",
            ]
        )


def test_a_plain_fsdp2_run_prints_no_turbo_line() -> None:
    result = dry_run(f"{ACTOR}.strategy=fsdp2")
    assert result.exit_code == 0, result.output
    assert "fsdp_turbo" not in result.output


@pytest.mark.parametrize(
    ("override", "named"),
    [
        (f"{TURBO}.distributed.tensor_parallel_size=2", "tensor and expert parallelism"),
        (f"{TURBO}.distributed.expert_parallel_size=8", "tensor and expert parallelism"),
        (f"+{TURBO}.distributed.ep_plan.dispatcher=fused", "ep_plan"),
        (f"+{TURBO}.distributed.cp_plan.loss_function_patches=[{{type: causal_lm_loss}}]", "FSDP-Turbo settings"),
        (f"+{TURBO}.module_patches=[{{target: a.b, replacement: c.d}}]", "FSDP-Turbo settings"),
        (f"{TURBO}.distributed.fsdp_plan.output_dtype=bf16", "its FSDP plan's output_dtype"),
        (f"{ACTOR}.fsdp_config.strategy=fsdp2", "sets actor_rollout_ref.actor.fsdp_config.strategy=fsdp_turbo"),
    ],
)
def test_fsdp_turbo_keys_without_an_equal_are_errors_naming_them(override: str, named: str) -> None:
    assert_refused(dry_run(f"{ACTOR}.strategy=fsdp_turbo", override), override, named)


def test_an_fsdp_turbo_run_writes_the_metrics_of_the_same_fsdp2_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A real run with verl's strategy=fsdp_turbo and its turbo_config and the same run with strategy=fsdp2 write
    the same metrics.jsonl, timing keys aside."""
    task = make_tiny_task(tmp_path / "task")
    _, turbo = tiny_run(
        tmp_path / "turbo",
        tiny_model_dir,
        task,
        f"{ACTOR}.strategy=fsdp_turbo",
        "actor_rollout_ref.ref.strategy=fsdp_turbo",
        f"{TURBO}.distributed.fully_shard_parallel_size=-1",
        f"{TURBO}.distributed.fsdp_plan.num_to_forward_prefetch=1",
        f"+{TURBO}.memory.recompute=true",
    )
    _, fsdp2 = tiny_run(
        tmp_path / "fsdp2",
        tiny_model_dir,
        task,
        f"{ACTOR}.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        f"{ACTOR}.fsdp_config.fsdp_size=-1",
    )
    assert numbers(turbo) == numbers(fsdp2)
    assert any("actor/pg_loss" in row for row in numbers(turbo))
