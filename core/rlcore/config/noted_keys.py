"""verl keys its scripts add with ``+`` that change nothing in verl with the engines rlcore has (or only speed):
accepted, kept in the config as given, and named in a plan note; the one with an equal in rlcore is mapped onto it.

- ``actor_rollout_ref.rollout.moe_tensor_parallel_size``: read only by verl's TensorRT-LLM rollout.
- ``actor_rollout_ref.actor.policy_loss.tau_pos`` / ``tau_neg``: verl's SAPO loss reads ``actor.tau_pos`` /
  ``tau_neg``; a value other than theirs is an error naming both keys.
- ``<role>.optim.override_optimizer_config.*`` (megatron-core 0.16's ``OptimizerConfig`` fields), read by verl's
  Megatron engine only (noted as having no effect on another): ``optimizer_cpu_offload=true`` with
  ``optimizer_offload_fraction=1`` is rlcore's ``<role>.megatron.optimizer_offload`` (verl steps the optimizer on the
  CPU, rlcore keeps its state there between steps: the same numbers); ``overlap_cpu_optimizer_d2h_h2d`` changes speed
  only; a fraction between 0 and 1 (partial offload) is refused; ``use_precision_aware_optimizer`` is noted while the
  precision dtypes stay float32 (megatron-core's defaults: the same numbers). Any other key there stays refused by
  name (:mod:`rlcore.config.unsupported`). ``offload_fraction`` is Megatron-Lite's spelling, read by its engine only
  (:mod:`rlcore.config.mlite`): 1 keeps the whole optimizer state on the CPU, rlcore's
  ``<role>.megatron.optimizer_offload``; 0 offloads nothing.

Torch-free.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlcore.config.mlite import chose_mlite

#: the roles whose optimizer verl's Megatron engine builds from ``optim.override_optimizer_config``
OPTIMIZER_ROLES = ("actor_rollout_ref.actor", "critic")
#: where megatron-core's ``OptimizerConfig`` overrides sit under a role
OVERRIDES = "optim.override_optimizer_config"
#: the keys accepted as noted -> why they change nothing (the plan note's reason)
NOTED_KEYS: dict[str, str] = {
    "actor_rollout_ref.rollout.moe_tensor_parallel_size": "it is read only by verl's TensorRT-LLM rollout, which "
    "rlcore does not have (verl's vLLM and SGLang rollouts ignore it too)",
    "actor_rollout_ref.actor.policy_loss.tau_pos": "verl's SAPO loss and rlcore read "
    "actor_rollout_ref.actor.tau_pos (this spelling is read nowhere)",
    "actor_rollout_ref.actor.policy_loss.tau_neg": "verl's SAPO loss and rlcore read "
    "actor_rollout_ref.actor.tau_neg (this spelling is read nowhere)",
}
#: the ``policy_loss`` spelling -> the key verl's SAPO loss reads
TAU_KEYS = {
    "actor_rollout_ref.actor.policy_loss.tau_pos": "actor_rollout_ref.actor.tau_pos",
    "actor_rollout_ref.actor.policy_loss.tau_neg": "actor_rollout_ref.actor.tau_neg",
}
#: megatron-core's ``OptimizerConfig`` fields accepted under ``override_optimizer_config``
OPTIMIZER_KEYS = (
    "optimizer_cpu_offload",
    "optimizer_offload_fraction",
    "overlap_cpu_optimizer_d2h_h2d",
    "use_precision_aware_optimizer",
    "offload_fraction",
)
#: Megatron-Lite's spelling of the offloaded fraction of the optimizer state (its engine's ``offload_fraction``)
MLITE_FRACTION = "offload_fraction"
#: its precision-aware dtypes, accepted at megatron-core's default only (float32: the same numbers)
PRECISION_DTYPES = ("main_params_dtype", "main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
#: the spellings of float32 verl's config passes to megatron-core
FLOAT32 = ("fp32", "float32", "torch.float32")


def _override_name(key: str) -> str | None:
    """The ``OptimizerConfig`` field ``key`` (``<role>.optim.override_optimizer_config.<field>``) sets; None for
    another key."""
    for role in OPTIMIZER_ROLES:
        prefix = f"{role}.{OVERRIDES}."
        if key.startswith(prefix) and "." not in key[len(prefix) :]:
            return key[len(prefix) :]
    return None


def noted_key(key: str, megatron_installed: bool) -> bool:
    """Whether ``key`` is accepted as noted (:data:`NOTED_KEYS`, or an ``override_optimizer_config`` field of
    :data:`OPTIMIZER_KEYS` or :data:`PRECISION_DTYPES` with rlcore's Megatron engine installed; the values are checked
    by :func:`resolve_noted_keys`)."""
    if key in NOTED_KEYS:
        return True
    name = _override_name(key)
    if name is None or not megatron_installed:
        return False
    return name in OPTIMIZER_KEYS or name in PRECISION_DTYPES


def _overrides(config: DictConfig, role: str) -> dict[str, Any]:
    """The role's ``override_optimizer_config`` fields as given (empty when none)."""
    section = OmegaConf.select(config, f"{role}.{OVERRIDES}")
    return dict(section) if isinstance(section, DictConfig) else {}


def resolve_noted_keys(config: DictConfig) -> list[str]:
    """Map ``optimizer_cpu_offload=true`` at fraction 1 onto ``<role>.megatron.optimizer_offload=true`` where the role
    trains on Megatron (verl's other engines do not read it); return the problems: a SAPO temperature under
    ``policy_loss`` that differs from the one the loss reads, a partial optimizer offload, a precision dtype below
    float32."""
    problems = []
    for spelled, read in TAU_KEYS.items():
        given = OmegaConf.select(config, spelled)
        if given is not None and given != OmegaConf.select(config, read):
            problems.append(
                f"{spelled}={given} differs from {read}={OmegaConf.select(config, read)}: verl's SAPO loss and "
                f"rlcore read only {read}, so {spelled} would change nothing; set {read}={given} instead"
            )
    for role in OPTIMIZER_ROLES:
        fields = _overrides(config, role)
        if not fields or OmegaConf.select(config, f"{role}.strategy") != "megatron":
            continue
        problems += _mlite_fraction(config, role, fields)
        fraction = fields.get("optimizer_offload_fraction", 0.0)
        whole = _whole(fraction)
        if whole is None:
            problems.append(
                f"{role}.{OVERRIDES}.optimizer_offload_fraction={fraction}: partial optimizer offload (a fraction "
                f"of megatron-core's optimizer state on the CPU) is not supported by rlcore; 1 with "
                f"optimizer_cpu_offload=true is {role}.megatron.optimizer_offload=true, 0 keeps it on the GPU"
            )
        elif whole and fields.get("optimizer_cpu_offload") is True:
            OmegaConf.update(config, f"{role}.megatron.optimizer_offload", True, merge=False)
        lowered = [
            f"{name}={fields[name]}" for name in PRECISION_DTYPES if str(fields.get(name, "fp32")) not in FLOAT32
        ]
        if lowered:
            problems.append(
                f"{role}.{OVERRIDES}: {', '.join(lowered)}: megatron-core's precision-aware optimizer with main "
                "parameters, gradients or Adam moments below float32 is not supported by rlcore (its AdamW keeps them "
                "in float32); leave them at fp32"
            )
    return problems


def _whole(fraction: Any) -> bool | None:
    """Whether an offload ``fraction`` is 1 (the whole state) or 0 (nothing); None for anything else."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or fraction not in (0, 1):
        return None
    return fraction == 1


def _mlite_fraction(config: DictConfig, role: str, fields: dict[str, Any]) -> list[str]:
    """Map Megatron-Lite's ``offload_fraction=1`` onto ``<role>.megatron.optimizer_offload=true``; the problems: the
    key under a role that does not train on Megatron-Lite, a partial offload."""
    if MLITE_FRACTION not in fields:
        return []
    key = f"{role}.{OVERRIDES}.{MLITE_FRACTION}"
    if not chose_mlite(config, role):
        return [
            f"{key}: Megatron-Lite's offloaded optimizer fraction, read only by its engine (actor@actor_rollout_ref."
            "actor=mlite_actor); verl's Megatron engine reads optimizer_offload_fraction with optimizer_cpu_offload=true"
        ]
    whole = _whole(fields[MLITE_FRACTION])
    if whole is None:
        return [
            f"{key}={fields[MLITE_FRACTION]}: partial optimizer offload (a fraction of the optimizer state on the CPU) "
            f"is not supported by rlcore; 1 is {role}.megatron.optimizer_offload=true, 0 keeps it on the GPU"
        ]
    if whole:
        OmegaConf.update(config, f"{role}.megatron.optimizer_offload", True, merge=False)
    return []


def _optimizer_note(role: str, name: str, value: Any, fields: dict[str, Any], strategy: Any) -> str:
    """The plan note of the role's ``override_optimizer_config.<name>=value`` (the role trains with ``strategy``)."""
    key = f"{role}.{OVERRIDES}.{name}"
    if strategy != "megatron":
        return f"{key}={value} has no effect: only verl's Megatron engine reads it ({role}.strategy={strategy})"
    offloaded = fields.get("optimizer_cpu_offload") is True and fields.get("optimizer_offload_fraction", 0) == 1
    if name == "optimizer_cpu_offload" and offloaded:
        return (
            f"{key}={value} (fraction 1) -> {role}.megatron.optimizer_offload=true: verl steps the optimizer on the "
            "CPU, rlcore keeps its state there between steps (the same numbers, another speed)"
        )
    if name in ("optimizer_cpu_offload", "optimizer_offload_fraction"):
        if offloaded:
            return f"{key}={value}: the whole optimizer state (see optimizer_cpu_offload's line)"
        return f"{key}={value} has no effect: megatron-core offloads nothing at fraction 0 or without optimizer_cpu_offload"
    if name == MLITE_FRACTION:
        if value == 1:
            return (
                f"{key}={value} -> {role}.megatron.optimizer_offload=true: Megatron-Lite keeps the whole optimizer "
                "state on the CPU, as rlcore does between steps (the same numbers, another speed)"
            )
        return f"{key}={value} has no effect: Megatron-Lite offloads nothing at fraction 0"
    if name in PRECISION_DTYPES:
        return f"{key}={value}: megatron-core's default (float32), the precision rlcore's AdamW keeps"
    if name == "overlap_cpu_optimizer_d2h_h2d":
        return f"{key}={value} changes speed, not the numbers: it overlaps megatron-core's CPU optimizer with copies"
    return (
        f"{key}={value}: with float32 main parameters, gradients and Adam moments (megatron-core's defaults) the "
        "precision-aware optimizer computes what rlcore's float32 AdamW does"
    )


def noted_plan_lines(config: DictConfig) -> list[str]:
    """One plan note per noted key in ``config``."""
    lines = []
    for key, why in NOTED_KEYS.items():
        value = OmegaConf.select(config, key)
        if value is not None:
            lines.append(f"{key}={value} has no effect: {why}")
    for role in OPTIMIZER_ROLES:
        fields = _overrides(config, role)
        strategy = OmegaConf.select(config, f"{role}.strategy")
        lines += [_optimizer_note(role, name, value, fields, strategy) for name, value in fields.items()]
    return lines
