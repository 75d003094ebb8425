"""verl's Megatron-Lite engine as a named substitution: ``actor@actor_rollout_ref.actor=mlite_actor`` (and
``model_engine=mlite``) is trained by rlcore's Megatron engine.

Megatron-Lite (``megatron.lite``, with verl's ``verl_mlite`` glue and its ``mlite_actor`` config, lives on a branch of
Megatron-LM, not on the package index, and runs on CUDA only) lays a model out with megatron-core's parallel state:
the sizes and offload switches of its ``<role>.engine`` section mean what ``<role>.megatron``'s do.
:func:`resolve_mlite` moves them there (:data:`MLITE_SAME`; ``vpp=1`` is one model chunk per pipeline rank, rlcore's
null; ``etp`` null is 1 in Megatron-Lite, as it sets it) and ``impl_cfg.recompute=[full]`` onto the role's gradient
checkpointing (megatron-core's full recompute of every layer, what rlcore's Megatron engine does with it). The speed
choices (:data:`MLITE_NOTED`) stay in ``<role>.engine`` as given, for rlcore-plugin-megatron's plan notes, which also
check ``impl_cfg.optimizer``: sharding the optimizer state is the same as rlcore's unsharded AdamW only over one
data-parallel rank. Any other key of the section is refused by name (:mod:`rlcore.config.unsupported`). Torch-free.
"""

from __future__ import annotations

from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from rlcore.config.dotted import flatten, nest

#: the roles with an engine section
ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")
#: where Megatron-Lite's settings sit under a role
SECTION = "engine"
#: the value of ``<role>.engine.strategy`` that marks a role trained on Megatron-Lite (verl's own marker)
MARKER = "mlite"
#: the keys of ``<role>.engine`` with the same meaning in rlcore's Megatron engine -> the key under the role
MLITE_SAME: dict[str, str] = {
    "tp": "megatron.tensor_model_parallel_size",
    "pp": "megatron.pipeline_model_parallel_size",
    "cp": "megatron.context_parallel_size",
    "ep": "megatron.expert_model_parallel_size",
    "param_offload": "megatron.param_offload",
    "optimizer_offload": "megatron.optimizer_offload",
    "grad_offload": "megatron.grad_offload",
    "dtype": "megatron.dtype",
}
#: the keys moved with a value of their own (:func:`_moved`)
MLITE_CONVERTED = ("vpp", "etp", "impl_cfg.recompute")
#: the keys of ``<role>.engine`` kept as given for the plan's notes: the marker and the speed choices
MLITE_NOTED = ("strategy", "attention_backend_override", "impl_cfg.use_thd", "impl_cfg.optimizer")
#: Megatron-Lite's optimizer paths (``impl_cfg.optimizer``): its FSDP2 wrapper and megatron-core's distributed one
OPTIMIZERS = ("fsdp2", "dist_opt")
#: where each role's gradient checkpointing is switched on (the reference model does not train)
CHECKPOINTING = {
    "actor_rollout_ref.actor": "actor_rollout_ref.model.enable_gradient_checkpointing",
    "critic": "critic.model.enable_gradient_checkpointing",
}


def _rest(key: str) -> str | None:
    """The part of ``key`` below ``<role>.engine.``; None for another key."""
    for role in ROLES:
        prefix = f"{role}.{SECTION}."
        if key.startswith(prefix):
            return key[len(prefix) :]
    return None


def mlite_key(key: str) -> bool:
    """Whether ``key`` is a key of Megatron-Lite's section that rlcore reads (:data:`MLITE_SAME`,
    :data:`MLITE_CONVERTED`, :data:`MLITE_NOTED`); its value is checked by :func:`resolve_mlite`."""
    rest = _rest(key)
    return rest is not None and (rest in MLITE_SAME or rest in MLITE_CONVERTED or rest in MLITE_NOTED)


def chose_mlite(config: DictConfig, role: str) -> bool:
    """Whether the ``role`` trains on Megatron-Lite here (its ``engine.strategy`` marker)."""
    return OmegaConf.select(config, f"{role}.{SECTION}.strategy") == MARKER


def _moved(role: str, rest: str, value: Any) -> tuple[str, Any] | str:
    """The rlcore key and value that ``<role>.engine.<rest>=value`` stands for, or the problem with it."""
    key = f"{role}.{SECTION}.{rest}"
    if rest in MLITE_SAME:
        return f"{role}.{MLITE_SAME[rest]}", value
    if rest == "vpp":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{key}={value!r}: Megatron-Lite's model chunks per pipeline rank must be a positive integer"
        return f"{role}.megatron.virtual_pipeline_model_parallel_size", None if value == 1 else value
    if rest == "etp":  # Megatron-Lite builds its parallel state with etp or 1
        return f"{role}.megatron.expert_tensor_parallel_size", 1 if value is None else value
    recompute = list(value) if isinstance(value, (list, tuple)) else value
    if recompute not in ([], ["full"]):
        return (
            f"{key}={value!r}: Megatron-Lite's selective recompute is not supported by rlcore's Megatron engine, "
            "whose gradient checkpointing recomputes every layer in full; set [full] or []"
        )
    if role not in CHECKPOINTING:
        return f"{key}={value!r} has no effect: the reference model does not train; leave it out"
    return CHECKPOINTING[role], recompute == ["full"]


def _check_noted(role: str, rest: str, value: Any) -> str | None:
    """The problem with the kept speed choice ``<role>.engine.<rest>=value`` (the marker is ``mlite`` here); None when
    it is fine."""
    key = f"{role}.{SECTION}.{rest}"
    if rest == "impl_cfg.use_thd" and value is not True:
        return f"{key}={value!r}: Megatron-Lite trains packed (THD) sequences only (it refuses false too); set true"
    if rest == "impl_cfg.optimizer" and value not in OPTIMIZERS:
        return f"{key}={value!r}: Megatron-Lite's optimizer paths are {' and '.join(OPTIMIZERS)}"
    return None


def resolve_mlite(config: DictConfig) -> list[str]:
    """For each role that chose Megatron-Lite, set its Megatron keys from its ``engine`` keys of the same meaning
    (Megatron-Lite's values govern, as its engine reads them) and its gradient checkpointing from
    ``impl_cfg.recompute``; ``engine`` then holds the marker and the speed choices only. Returns the problems: a bad
    value, and a Megatron-Lite key under a role that does not train on it (verl has no ``engine`` section then)."""
    problems = []
    for role in ROLES:
        section = OmegaConf.select(config, f"{role}.{SECTION}")
        if not isinstance(section, DictConfig):
            continue
        given = flatten(cast("dict[str, Any]", OmegaConf.to_container(section)))
        if not chose_mlite(config, role):
            problems += [
                f"{role}.{SECTION}.{rest}: a setting of verl's Megatron-Lite engine, read only when the role trains on "
                f"it (actor@actor_rollout_ref.actor=mlite_actor)"
                for rest in given
            ]
            continue
        kept: dict[str, Any] = {}
        if "etp" not in given:
            given["etp"] = None
        for rest, value in given.items():
            if rest in MLITE_NOTED:
                problem = _check_noted(role, rest, value)
                if problem is None:
                    kept[rest] = value
                else:
                    problems.append(problem)
                continue
            moved = _moved(role, rest, value)
            if isinstance(moved, str):
                problems.append(moved)
            else:
                OmegaConf.update(config, moved[0], moved[1], merge=False)
        OmegaConf.update(config, f"{role}.{SECTION}", OmegaConf.create(nest(kept)), merge=False)
    return problems
