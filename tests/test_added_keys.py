"""``+key=value`` (Hydra's "add a key") is accepted only where the key has an effect: below a free-form mapping (a
field typed ``dict[str, Any]``: a library's keyword arguments, an override config, named entries) or where the key
is declared anyway. Anywhere else an added key gets an unknown key's error: the missing feature it names, or
"rlcore has no such key, and <parent> takes no added keys"."""

from __future__ import annotations

from typing import Any

import pytest
from omegaconf import OmegaConf
from rlcore_testkit import runs

from rlcore.api import ConfigError
from rlcore.config import load_config
from rlcore.config.free_form import free_form_keys
from rlcore.config.loader import default_config, known_keys
from rlcore.plugins import load_plugins

BASE = ("data.train_files=x.parquet", "actor_rollout_ref.model.path=m")


def dry_run(*args: str) -> Any:
    """``rlcore run --dry-run`` with a model and data path, plus ``args``."""
    return runs.dry_run(*BASE, *args)


def dry_run_config(*args: str) -> Any:
    """The resolved config a passing dry run prints."""
    result = dry_run(*args)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return OmegaConf.create(result.output[result.output.index("data:") :])


@pytest.mark.parametrize(
    ("override", "where", "value"),
    [
        (
            "+actor_rollout_ref.actor.megatron.override_transformer_config.recompute_method=uniform",
            "actor_rollout_ref.actor.megatron.override_transformer_config.recompute_method",
            "uniform",
        ),
        (
            "+actor_rollout_ref.rollout.engine_kwargs.vllm.mm_processor_cache_gb=0",
            "actor_rollout_ref.rollout.vllm.engine_kwargs.mm_processor_cache_gb",
            0,
        ),
        (
            "+actor_rollout_ref.rollout.engine_kwargs.vllm.compilation_config.cudagraph_mode=FULL",
            "actor_rollout_ref.rollout.vllm.engine_kwargs.compilation_config.cudagraph_mode",
            "FULL",
        ),
        (
            "+actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=triton",
            "actor_rollout_ref.rollout.sglang.engine_kwargs.attention_backend",
            "triton",
        ),
        ("+custom_reward_function.reward_kwargs.margin=0.5", "custom_reward_function.reward_kwargs.margin", 0.5),
        (
            "+data.apply_chat_template_kwargs.reasoning_effort=low",
            "data.apply_chat_template_kwargs.reasoning_effort",
            "low",
        ),
        (
            "+actor_rollout_ref.model.override_config.max_position_embeddings=64",
            "actor_rollout_ref.model.override_config.max_position_embeddings",
            64,
        ),
        (
            "+ray_kwargs.ray_init.runtime_env.env_vars.NCCL_DEBUG=WARN",
            "ray_kwargs.ray_init.runtime_env.env_vars.NCCL_DEBUG",
            "WARN",
        ),
        (
            "+distillation.teacher_models.gsm8k.key=openai/gsm8k",
            "distillation.teacher_models.gsm8k.key",
            "openai/gsm8k",
        ),
        # a declared key given with '+' is that key
        (
            "+actor_rollout_ref.actor.fsdp_config.model_dtype=bf16",
            "actor_rollout_ref.actor.fsdp_config.model_dtype",
            "bf16",
        ),
    ],
)
def test_a_key_added_below_a_free_form_mapping_arrives_there(override: str, where: str, value: Any) -> None:
    config = dry_run_config(override)
    assert OmegaConf.select(config, where) == value


@pytest.mark.parametrize("section", ["reward_model", "reward"])
def test_verls_dapo_reward_kwargs_set_the_overlong_buffer(section: str) -> None:
    """verl's DAPO reward manager takes ``overlong_buffer_cfg`` and ``max_resp_len`` from ``reward_kwargs`` (0.9:
    ``reward_model.reward_kwargs``, 0.10: ``reward.reward_kwargs``); rlcore's DAPO reads them from
    ``reward_model.overlong_buffer``, so they arrive there instead of being passed along unread."""
    config = dry_run_config(
        "reward_model.reward_manager=dapo",
        f"+{section}.reward_kwargs.overlong_buffer_cfg.enable=True",
        f"+{section}.reward_kwargs.overlong_buffer_cfg.len=4",
        f"+{section}.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
        f"+{section}.reward_kwargs.max_resp_len=512",
    )
    buffer = config.reward_model.overlong_buffer
    assert (buffer.enable, buffer.len, buffer.penalty_factor, buffer.max_response_length) == (True, 4, 1.0, 512)
    assert config.reward_model.reward_kwargs == {}


def test_without_the_plus_the_same_key_arrives_too() -> None:
    config = dry_run_config("data.apply_chat_template_kwargs.enable_thinking=false")
    assert config.data.apply_chat_template_kwargs.enable_thinking is False


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "+actor_rollout_ref.actor.foo=2",
            "unknown config key '+actor_rollout_ref.actor.foo': rlcore has no such key, and actor_rollout_ref.actor "
            "takes no added keys.",
        ),
        (
            "+nope.x=1",
            "unknown config key '+nope.x': rlcore has no such key, and the top level of the config takes no added keys.",
        ),
        # a key next to a noted one (rlcore.config.noted_keys) is not noted
        (
            "+actor_rollout_ref.actor.policy_loss.tau=1.0",
            "unknown config key '+actor_rollout_ref.actor.policy_loss.tau': rlcore has no such key, and "
            "actor_rollout_ref.actor.policy_loss takes no added keys.",
        ),
        # a missing feature is named as for a key given without '+'
        (
            "+actor_rollout_ref.actor.megatron.foo=2",
            "actor_rollout_ref.actor.megatron.foo: verl's Megatron backend settings",
        ),
        (
            "+actor_rollout_ref.actor.optim.override_optimizer_config.use_distributed_optimizer=true",
            "actor_rollout_ref.actor.optim.override_optimizer_config.use_distributed_optimizer: verl's Megatron "
            "backend settings",
        ),
        (
            "+actor_rollout_ref.rollout.quantization=fp8",
            "actor_rollout_ref.rollout.quantization: these rollout options",
        ),
        (
            "+actor_rollout_ref.rollout.engine_kwargs.trtllm.batch_wait_timeout_iters=4",
            "actor_rollout_ref.rollout.engine_kwargs.trtllm.batch_wait_timeout_iters: these rollout options",
        ),
        # the crash this replaced: a bare KeyError in the FSDP plugin's plan lines
        (
            "model_engine=torchtitan +actor_rollout_ref.actor.torchtitan.tensor_parallel_size=2",
            "actor_rollout_ref.actor.torchtitan.tensor_parallel_size: verl's TorchTitan engine settings",
        ),
    ],
)
def test_a_key_added_where_it_has_no_effect_is_refused(override: str, message: str) -> None:
    result = dry_run(*override.split())
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output and "KeyError" not in result.output


def test_the_unknown_key_error_names_where_keys_may_be_added() -> None:
    result = dry_run("data.nope=1")
    assert result.exit_code == 2
    assert "unknown config key 'data.nope'." in result.output
    assert "new keys, with or without '+', go only below a free-form mapping" in result.output
    assert "prefix with '+'" not in result.output


def test_a_teacher_entry_takes_any_name_and_a_teachers_keys() -> None:
    """``distillation.teacher_models`` is typed ``dict[str, TeacherConfig]``: an entry of any name is accepted with
    a teacher's keys (rlcore-plugin-distill reads them), any other key of an entry is refused, and a teacher's verl
    serving key names the missing feature."""
    from rlcore_plugin_distill.settings import distillation_settings

    config = load_config(overrides=[*BASE, "+distillation.teacher_models.gsm8k.model_path=/m"])
    assert config.distillation.teacher_models.gsm8k.model_path == "/m"
    assert [(t.name, t.model_path) for t in distillation_settings(config).teachers] == [("gsm8k", "/m")]
    result = dry_run(
        "+distillation.teacher_models.gsm8k.nope=1",
        "+distillation.teacher_models.gsm8k.inference.enforce_eager=true",
    )
    assert result.exit_code == 2
    assert (
        "unknown config key '+distillation.teacher_models.gsm8k.nope': rlcore has no such key, and "
        "distillation.teacher_models.gsm8k takes no added keys." in result.output
    )
    assert "distillation.teacher_models.gsm8k.inference.enforce_eager: a serving engine for distillation" in (
        result.output
    )


def test_the_free_form_mappings_are_the_mapping_typed_fields() -> None:
    """The empty mappings of the defaults are the mapping-typed fields; a section that takes added keys
    (``ray_kwargs.ray_init``: more ray.init arguments) is free-form besides its typed keys; a ``dict[str, <dataclass>]``
    field (``distillation.teacher_models``) and ``trainer.monitors`` declare their entries' keys."""
    manager = load_plugins()
    typed = free_form_keys(manager)
    assert known_keys(default_config(manager)).free == typed.free - {"ray_kwargs.ray_init"}
    assert "ray_kwargs.ray_init" in typed.free
    assert "actor_rollout_ref.actor.megatron.override_transformer_config" in typed.free
    assert "distillation.teacher_models.*.inference.max_model_len" in typed.entry_leaves
    assert "trainer.monitors.*.enable" in typed.entry_leaves


def test_a_torchtitan_key_the_substitution_does_not_keep_is_named_in_a_hand_made_config() -> None:
    """The FSDP plugin's plan lines name a key of ``<role>.torchtitan`` it keeps no note for (a config built without
    the loader) instead of raising a bare KeyError."""
    from rlcore_plugin_fsdp.substitution import substitution_plan_lines

    config = OmegaConf.create(
        {"actor_rollout_ref": {"actor": {"torchtitan": {"strategy": "torchtitan", "tensor_parallel_size": 2}}}}
    )
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.actor\.torchtitan\.tensor_parallel_size: not one of"):
        substitution_plan_lines(config)
