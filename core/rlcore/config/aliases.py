"""verl's spellings of keys that rlcore names differently: one canonical key, the verl spelling accepted.

An alias is a key prefix: every key below it maps to the same place below the canonical key
(``critic.model.fsdp_config.param_offload`` → ``critic.fsdp_config.param_offload``). Aliases are applied
to every config file, preset and override before the keys are checked; ``rlcore config show`` marks each
canonical key with the verl spellings it also accepts (``# verl: ...`` for 0.9's, ``# verl 0.10: ...`` for the
spellings verl 0.10's config tree introduced). ``docs/from-verl.md`` lists them (a test keeps the page and these
tables equal).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: verl's spelling -> rlcore's canonical key
ALIASES: dict[str, str] = {
    "critic.model.fsdp_config": "critic.fsdp_config",
    "reward_model.model.fsdp_config": "reward_model.fsdp_config",
    "reward_model.model.optim": "reward_model.optim",
    "reward_model.num_workers": "reward_model.scorer_workers",
    "actor_rollout_ref.rollout.engine_kwargs.vllm": "actor_rollout_ref.rollout.vllm.engine_kwargs",
    "actor_rollout_ref.rollout.engine_kwargs.sglang": "actor_rollout_ref.rollout.sglang.engine_kwargs",
    "data.trust_remote_code": "actor_rollout_ref.model.trust_remote_code",
    "reward_manager.name": "reward_model.reward_manager",
    "actor_rollout_ref.actor.use_remove_padding": "actor_rollout_ref.model.use_remove_padding",
    "actor_rollout_ref.actor.use_fused_kernels": "actor_rollout_ref.model.use_fused_kernels",
    "actor_rollout_ref.actor.rollout_n": "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.ref.rollout_n": "actor_rollout_ref.rollout.n",
    "critic.rollout_n": "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size": "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile": "actor_rollout_ref.actor.use_torch_compile",
    "actor_rollout_ref.actor.fsdp_config.entropy_from_logits_with_chunking": "actor_rollout_ref.actor.entropy_from_logits_with_chunking",
    "actor_rollout_ref.actor.fsdp_config.entropy_checkpointing": "actor_rollout_ref.actor.entropy_checkpointing",
    "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size": "actor_rollout_ref.ref.ulysses_sequence_parallel_size",
    "actor_rollout_ref.ref.fsdp_config.use_torch_compile": "actor_rollout_ref.ref.use_torch_compile",
    "actor_rollout_ref.ref.fsdp_config.entropy_from_logits_with_chunking": "actor_rollout_ref.ref.entropy_from_logits_with_chunking",
    "actor_rollout_ref.ref.fsdp_config.entropy_checkpointing": "actor_rollout_ref.ref.entropy_checkpointing",
    "critic.fsdp_config.ulysses_sequence_parallel_size": "critic.ulysses_sequence_parallel_size",
    **{
        f"{role}.fsdp_config.{key}": f"{role}.{key}"
        for role in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")
        for key in ("pad_to_length", "pad_to_length_bucket")
    },
    "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype": "actor_rollout_ref.actor.fsdp_config.dtype",
    "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype": "actor_rollout_ref.ref.fsdp_config.dtype",
    "critic.fsdp_config.mixed_precision.param_dtype": "critic.fsdp_config.dtype",
    "reward_model.fsdp_config.mixed_precision.param_dtype": "reward_model.fsdp_config.dtype",
    "reward_model.reward_kwargs.overlong_buffer_cfg": "reward_model.overlong_buffer",
    "reward_model.reward_kwargs.max_resp_len": "reward_model.overlong_buffer.max_response_length",
}

#: verl 0.10's spelling (its ``reward`` section and engine sections) -> rlcore's canonical key
VERL010_ALIASES: dict[str, str] = {
    "reward.reward_manager.name": "reward_model.reward_manager",
    "reward.num_workers": "reward_model.scorer_workers",
    "reward.custom_reward_function": "custom_reward_function",
    "reward.reward_model.model_path": "reward_model.model.path",
    "reward.reward_model": "reward_model",
    "critic.fsdp": "critic.fsdp_config",
    "actor_rollout_ref.actor.fsdp_config.entropy_from_logits_chunk_size": "actor_rollout_ref.actor.entropy_from_logits_chunk_size",
    "actor_rollout_ref.ref.fsdp_config.entropy_from_logits_chunk_size": "actor_rollout_ref.ref.entropy_from_logits_chunk_size",
    "actor_rollout_ref.rollout.n_gpus_per_node": "trainer.rollout_n_gpus_per_node",
    "reward.sandbox_fusion": "reward_model.sandbox_fusion",
    "sandbox_fusion": "reward_model.sandbox_fusion",
    "reward.reward_kwargs": "reward_model.reward_kwargs",
}

#: the roles of verl's engine sections
_ENGINE_ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")
#: verl's VeOmni engine section (``<role>.veomni.*``): the keys whose meaning rlcore's FSDP engine has, under its
#: name (``model_engine=veomni`` is trained by that engine: :data:`rlcore.config.compose.SUBSTITUTED_ENGINES`)
_VEOMNI_SAME = {
    "param_offload": "fsdp_config.param_offload",
    "optimizer_offload": "fsdp_config.optimizer_offload",
    "fsdp_size": "fsdp_config.fsdp_size",
    "forward_prefetch": "fsdp_config.forward_prefetch",
    "ulysses_parallel_size": "ulysses_sequence_parallel_size",
    "use_torch_compile": "use_torch_compile",
    "entropy_from_logits_with_chunking": "entropy_from_logits_with_chunking",
    "entropy_checkpointing": "entropy_checkpointing",
    "router_replay": "router_replay",
    "pad_to_length": "pad_to_length",
    "pad_to_length_bucket": "pad_to_length_bucket",
}
#: of those, the ones only the actor and the reference have (rlcore's critic has no compile, entropy or replay)
_VEOMNI_POLICY_ONLY = (
    "use_torch_compile",
    "entropy_from_logits_with_chunking",
    "entropy_checkpointing",
    "router_replay",
)
#: verl's TorchTitan engine section (``<role>.torchtitan.*``): the keys whose meaning rlcore's FSDP engine has, under
#: its name (``model_engine=torchtitan`` is trained by that engine; torchtitan 0.3.0's language models do not train
#: on a CPU: docs/from-verl.md, "verl's VeOmni, TorchTitan, FSDP-Turbo, MindSpeed and Megatron-Lite engines")
_TORCHTITAN_SAME = {
    "param_offload": "fsdp_config.param_offload",
    "optimizer_offload": "fsdp_config.optimizer_offload",
    "data_parallel_shard_size": "fsdp_config.fsdp_size",
    "full_determinism": "fsdp_config.full_determinism",
    "use_torch_compile": "use_torch_compile",
    "entropy_from_logits_with_chunking": "entropy_from_logits_with_chunking",
    "entropy_from_logits_chunk_size": "entropy_from_logits_chunk_size",
    "entropy_checkpointing": "entropy_checkpointing",
}
#: of those, the ones only the actor and the reference have
_TORCHTITAN_POLICY_ONLY = (
    "use_torch_compile",
    "entropy_from_logits_with_chunking",
    "entropy_from_logits_chunk_size",
    "entropy_checkpointing",
)
#: verl's MindSpeed engine section (``<role>.mindspeed.*``): the keys it shares with verl's Megatron section
#: (MindSpeed is megatron-core with Ascend patches; ``model_engine=mindspeed`` is trained by rlcore-plugin-megatron)
_MINDSPEED_SAME = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
    "sequence_parallel",
    "param_offload",
    "grad_offload",
    "optimizer_offload",
    "use_mbridge",
    "vanilla_mbridge",
    "seed",
)
#: verl's spellings in the sections of the engines rlcore substitutes (VeOmni, TorchTitan, MindSpeed) -> rlcore's
#: key; kept
#: apart from :data:`ALIASES` so that ``rlcore config show`` marks no canonical key with them
ENGINE_ALIASES: dict[str, str] = {
    **{
        f"{role}.veomni.{key}": f"{role}.{target}"
        for role in _ENGINE_ROLES
        for key, target in _VEOMNI_SAME.items()
        if role != "critic" or key not in _VEOMNI_POLICY_ONLY
    },
    **{
        f"{role}.torchtitan.{key}": f"{role}.{target}"
        for role in _ENGINE_ROLES
        for key, target in _TORCHTITAN_SAME.items()
        if role != "critic" or key not in _TORCHTITAN_POLICY_ONLY
    },
    **{f"{role}.mindspeed.{key}": f"{role}.megatron.{key}" for role in _ENGINE_ROLES for key in _MINDSPEED_SAME},
    # verl's engine config carries routing replay (EngineConfig.router_replay): the role's own router_replay
    **{f"{role}.megatron.router_replay": f"{role}.router_replay" for role in _ENGINE_ROLES[:2]},
}

#: every accepted spelling, longest first (the most specific alias wins)
_ALL_ALIASES: dict[str, str] = dict(
    sorted({**ALIASES, **VERL010_ALIASES, **ENGINE_ALIASES}.items(), key=lambda kv: -len(kv[0]))
)


def canonical_key(key: str) -> str:
    """rlcore's name for ``key`` (``key`` itself when it is not a verl spelling)."""
    for _ in range(len(_ALL_ALIASES) + 1):  # aliases may chain (critic.model.fsdp_config.X -> critic.fsdp_config.X)
        alias = next((a for a in _ALL_ALIASES if key == a or key.startswith(a + ".")), None)
        if alias is None:
            return key
        key = _ALL_ALIASES[alias] + key[len(alias) :]
    return key


def rename_aliases(dotted: Mapping[str, Any], source: str) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """Rename the verl spellings among the dotted keys of one source.

    Returns the renamed mapping, ``{canonical: spelling as given}`` for the renamed keys (so that errors can
    name the key the user wrote) and the problems: a key given twice, under both names, with different values.
    """
    renamed: dict[str, Any] = {}
    given: dict[str, str] = {}
    problems: list[str] = []
    for key, value in dotted.items():
        target = canonical_key(key)
        if target in renamed and renamed[target] != value:
            first = given.get(target, target)
            problems.append(
                f"{source}: {key}={value!r} and {first}={renamed[target]!r} set the same key "
                f"({target}) to different values"
            )
            continue
        renamed[target] = value
        if target != key:
            given[target] = key
    return renamed, given, problems


def with_alias_comments(yaml_text: str) -> str:
    """Mark each canonical key in ``yaml_text`` (OmegaConf's block-style dump) with its verl spellings:
    ``# verl: <0.9 spellings>; verl 0.10: <0.10 spellings>``."""
    marks: dict[str, dict[str, list[str]]] = {}
    for label, table in (("verl", ALIASES), ("verl 0.10", VERL010_ALIASES)):
        for alias, target in table.items():
            marks.setdefault(target, {}).setdefault(label, []).append(alias)
    spellings = {
        target: "; ".join(f"{label}: {', '.join(names)}" for label, names in by_label.items())
        for target, by_label in marks.items()
    }
    path: list[str] = []
    lines = []
    for line in yaml_text.splitlines():
        stripped = line.lstrip(" ")
        if stripped and not stripped.startswith(("-", "#")) and ":" in stripped:
            depth = (len(line) - len(stripped)) // 2
            path = path[:depth] + [stripped.split(":", 1)[0].strip("'\"")]
            names = spellings.get(".".join(path))
            if names:
                line = f"{line}  # {names}"
        lines.append(line)
    return "\n".join(lines) + ("\n" if yaml_text.endswith("\n") else "")
