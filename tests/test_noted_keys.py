"""The verl keys added with '+' that change nothing in verl (or only speed) are accepted as noted
(rlcore.config.noted_keys): the dry run names each, the one with an equal in rlcore arrives there, and a value that
would mean something else is an error naming the key."""

from __future__ import annotations

from typing import Any

import pytest
from omegaconf import OmegaConf
from rlcore_testkit import runs

from rlcore.api import ConfigError
from rlcore.config import load_config

BASE = ("data.train_files=x.parquet", "actor_rollout_ref.model.path=m")
ACTOR = "actor_rollout_ref.actor"
OVERRIDES = f"{ACTOR}.optim.override_optimizer_config"
#: verl 0.9's Megatron scripts' full optimizer offload, as they add it
OFFLOAD = (
    f"+{OVERRIDES}.optimizer_offload_fraction=1.",
    f"+{OVERRIDES}.overlap_cpu_optimizer_d2h_h2d=True",
    f"+{OVERRIDES}.use_precision_aware_optimizer=True",
    f"+{OVERRIDES}.optimizer_cpu_offload=True",
)


def dry_run(*args: str) -> Any:
    """``rlcore run --dry-run`` with a model and data path, plus ``args``."""
    return runs.dry_run(*BASE, *args)


def test_the_tensorrt_llm_moe_size_is_noted() -> None:
    result = dry_run("+actor_rollout_ref.rollout.moe_tensor_parallel_size=2")
    assert result.exit_code == 0, result.output
    assert (
        "actor_rollout_ref.rollout.moe_tensor_parallel_size=2 has no effect: it is read only by verl's TensorRT-LLM "
        "rollout, which rlcore does not have" in result.output
    )


@pytest.mark.parametrize("name", ["tau_pos", "tau_neg"])
def test_sapo_temperatures_under_policy_loss_are_noted_at_the_actors_value(name: str) -> None:
    actor = load_config(overrides=[f"{ACTOR}.{name}=2.5", f"+{ACTOR}.policy_loss.{name}=2.5"]).actor_rollout_ref.actor
    assert (actor[name], actor.policy_loss[name]) == (2.5, 2.5)
    result = dry_run(f"+{ACTOR}.policy_loss.{name}={1.0 if name == 'tau_pos' else 1.05}")
    assert result.exit_code == 0, result.output
    assert f"{ACTOR}.policy_loss.{name}=" in result.output
    assert f"has no effect: verl's SAPO loss and rlcore read {ACTOR}.{name}" in result.output


def test_a_sapo_temperature_under_policy_loss_that_differs_is_an_error_naming_both_keys() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(overrides=[f"+{ACTOR}.policy_loss.tau_pos=3.0"])
    assert (
        f"{ACTOR}.policy_loss.tau_pos=3.0 differs from {ACTOR}.tau_pos=1.0: verl's SAPO loss and rlcore read only "
        f"{ACTOR}.tau_pos" in str(caught.value)
    )


def test_full_optimizer_cpu_offload_is_megatrons_optimizer_offload() -> None:
    config = load_config(overrides=[f"{ACTOR}.strategy=megatron", *OFFLOAD])
    assert config.actor_rollout_ref.actor.megatron.optimizer_offload is True
    assert config.critic.megatron.optimizer_offload is False
    assert OmegaConf.to_container(config.actor_rollout_ref.actor.optim.override_optimizer_config) == {
        "optimizer_offload_fraction": 1.0,
        "overlap_cpu_optimizer_d2h_h2d": True,
        "use_precision_aware_optimizer": True,
        "optimizer_cpu_offload": True,
    }
    result = dry_run(f"{ACTOR}.strategy=megatron", *OFFLOAD)
    assert result.exit_code == 0, result.output
    for line in (
        f"{OVERRIDES}.optimizer_cpu_offload=True (fraction 1) -> {ACTOR}.megatron.optimizer_offload=true",
        f"{OVERRIDES}.overlap_cpu_optimizer_d2h_h2d=True changes speed, not the numbers",
        f"{OVERRIDES}.use_precision_aware_optimizer=True: with float32 main parameters",
        f"{OVERRIDES}.optimizer_offload_fraction=1.0: the whole optimizer state",
    ):
        assert line in result.output, line


def test_the_critics_optimizer_offload_arrives_at_the_critic() -> None:
    critic = "critic.optim.override_optimizer_config"
    config = load_config(
        overrides=[
            f"{ACTOR}.strategy=megatron",
            f"+{critic}.optimizer_cpu_offload=true",
            f"+{critic}.optimizer_offload_fraction=1",
        ]
    )
    assert (config.critic.megatron.optimizer_offload, config.actor_rollout_ref.actor.megatron.optimizer_offload) == (
        True,
        False,
    )


@pytest.mark.parametrize(
    ("overrides", "note"),
    [
        ((f"+{OVERRIDES}.optimizer_cpu_offload=true",), "optimizer_cpu_offload=True has no effect: megatron-core"),
        ((f"+{OVERRIDES}.optimizer_offload_fraction=1",), "optimizer_offload_fraction=1 has no effect: megatron-core"),
    ],
)
def test_an_offload_that_offloads_nothing_in_megatron_core_changes_nothing(
    overrides: tuple[str, ...], note: str
) -> None:
    assert (
        load_config(overrides=[f"{ACTOR}.strategy=megatron", *overrides]).actor_rollout_ref.actor.megatron[
            "optimizer_offload"
        ]
        is False
    )
    result = dry_run(f"{ACTOR}.strategy=megatron", *overrides)
    assert result.exit_code == 0, result.output
    assert note in result.output


def test_optimizer_overrides_on_fsdp_are_noted_as_read_only_by_megatron() -> None:
    config = load_config(overrides=list(OFFLOAD))
    assert config.actor_rollout_ref.actor.megatron.optimizer_offload is False
    result = dry_run(*OFFLOAD)
    assert result.exit_code == 0, result.output
    assert (
        f"{OVERRIDES}.optimizer_cpu_offload=True has no effect: only verl's Megatron engine reads it "
        f"({ACTOR}.strategy=fsdp)" in result.output
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            f"+{OVERRIDES}.optimizer_offload_fraction=0.5",
            f"{OVERRIDES}.optimizer_offload_fraction=0.5: partial optimizer offload",
        ),
        (
            f"+{OVERRIDES}.main_params_dtype=bf16",
            f"{OVERRIDES}: main_params_dtype=bf16: megatron-core's precision-aware optimizer with main parameters, "
            "gradients or Adam moments below float32 is not supported by rlcore",
        ),
        (
            f"+{OVERRIDES}.exp_avg_sq_dtype=fp16",
            f"{OVERRIDES}: exp_avg_sq_dtype=fp16: megatron-core's precision-aware optimizer",
        ),
        (
            f"+{OVERRIDES}.optimizer_cpu_offload_fraction=1",
            f"{OVERRIDES}.optimizer_cpu_offload_fraction: verl's Megatron backend settings",
        ),
    ],
)
def test_an_optimizer_override_that_changes_the_numbers_is_refused_by_name(override: str, message: str) -> None:
    result = dry_run(f"{ACTOR}.strategy=megatron", f"+{OVERRIDES}.use_precision_aware_optimizer=true", override)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_float32_precision_dtypes_are_megatron_cores_defaults() -> None:
    dtypes = [f"+{OVERRIDES}.{name}=fp32" for name in ("main_params_dtype", "main_grads_dtype", "exp_avg_dtype")]
    result = dry_run(f"{ACTOR}.strategy=megatron", f"+{OVERRIDES}.use_precision_aware_optimizer=true", *dtypes)
    assert result.exit_code == 0, result.output
    assert f"{OVERRIDES}.main_params_dtype=fp32: megatron-core's default (float32)" in result.output


def test_without_the_megatron_plugin_optimizer_overrides_name_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlcore.plugins import make_plugin_manager

    monkeypatch.setenv("RLCORE_DISABLE_PLUGINS", "rlcore-plugin-megatron")
    with pytest.raises(ConfigError) as caught:
        load_config(overrides=[f"+{OVERRIDES}.optimizer_cpu_offload=true"], manager=make_plugin_manager())
    assert f"{OVERRIDES}.optimizer_cpu_offload: verl's Megatron backend settings" in str(caught.value)
    assert "pip install rlcore-plugin-megatron" in str(caught.value)
