"""The mixture-of-experts fields of a ``megatron`` section's ``override_transformer_config`` (verl passes
megatron-core's ``moe_*`` fields there): which act, which are only a kernel choice, which are rejected.

Torch-free, like :mod:`rlcore_plugin_megatron.settings`: the dry run's ``check_config`` calls
:func:`moe_overrides` so that a bad field fails before any model is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlcore.api import RLCoreError
from rlcore_plugin_megatron.settings import MegatronSettings

#: megatron-core's token dispatchers; on the CPU only ``allgather`` runs (its ``alltoall`` dispatcher creates
#: CUDA streams, ``flex`` needs DeepEP or HybridEP kernels), although gloo has ``all_to_all_single``
DISPATCHERS: tuple[str, ...] = ("allgather", "alltoall", "flex")
#: fields that choose a kernel (Transformer Engine's grouped GEMM and fused permutation, DeepEP) or overlap
#: communication, not the numbers: the local layer spec (sequential experts, no Transformer Engine) uses none of
#: them, so they are dropped on every device, and the plan line says so
KERNEL_CHOICES: dict[str, Any] = {
    "moe_grouped_gemm": False,
    "moe_use_legacy_grouped_gemm": False,
    "moe_permute_fusion": False,
    "moe_router_fusion": False,
    "moe_enable_deepep": False,
    "moe_flex_dispatcher_backend": "deepep",
    "moe_shared_expert_overlap": False,
    "overlap_moe_expert_parallel_comm": False,
    "moe_deepep_num_sms": 20,
    "moe_hybridep_num_sms": 16,
}
#: fields the Hugging Face config decides (the model's architecture): accepted only at the model's value
FROM_MODEL: tuple[str, ...] = (
    "num_moe_experts",
    "moe_router_topk",
    "moe_ffn_hidden_size",
    "moe_router_pre_softmax",
    "moe_router_score_function",
    "moe_shared_expert_intermediate_size",
    "moe_shared_expert_gate",
    "moe_layer_freq",
    "moe_router_topk_scaling_factor",
    "moe_router_num_groups",
    "moe_router_group_topk",
    "moe_latent_size",
)
#: fields rejected when they differ from these values, and why
REJECTED: dict[str, tuple[Any, str]] = {
    "moe_expert_capacity_factor": (
        None,
        "token dropping (an expert capacity) is not supported: Qwen3-MoE routes every token; leave it null",
    ),
    "moe_pad_expert_input_to_capacity": (
        False,
        "pads to an expert capacity, which is not supported (no token dropping)",
    ),
    "moe_token_dropping": (False, "token dropping is not supported (Qwen3-MoE routes every token)"),
    "moe_enable_routing_replay": (
        False,
        "routing replay is switched by actor_rollout_ref.actor.router_replay.mode (R2/R3), not by this field",
    ),
    "moe_router_force_load_balancing": (False, "replaces the router by random logits (a benchmark switch); set false"),
    "moe_router_padding_for_quantization": (
        False,
        "needs fp8/fp4 training, which rlcore's Megatron engine does not do",
    ),
    "moe_router_padding_for_fp8": (False, "needs fp8 training, which rlcore's Megatron engine does not do"),
    "moe_extended_tp": (False, "experts over tensor-parallel ranks are not supported; set false"),
}


@dataclass(frozen=True)
class MoEOverrides:
    """What a section's ``override_transformer_config`` asks of the MoE layers.

    Attributes:
        fields: the ``moe_*`` fields to apply over the ones the Hugging Face config gives (kernel choices
            dropped on the CPU, the dispatcher resolved).
        from_model: the fields that must equal the Hugging Face config's (checked once the model is known).
        dispatcher: the token dispatcher the engine builds.
        notes: what the plan line says about dropped or replaced fields.
    """

    fields: dict[str, Any] = field(default_factory=dict)
    from_model: dict[str, Any] = field(default_factory=dict)
    dispatcher: str = "allgather"
    notes: tuple[str, ...] = ()


def moe_overrides(settings: MegatronSettings, *, on_cpu: bool) -> MoEOverrides:
    """The MoE part of ``settings.override_transformer_config`` on a CPU (``on_cpu``) or CUDA run.

    Kernel choices (:data:`KERNEL_CHOICES`) are dropped with a note; the token dispatcher
    (``moe_token_dispatcher_type``) is ``allgather`` on the CPU whatever was asked, and on CUDA ``flex`` (DeepEP) is
    ``alltoall`` (noted when another was asked); :data:`REJECTED` fields at another value are errors
    naming the key. Other ``moe_*`` fields (``moe_aux_loss_coeff``, ``moe_router_load_balancing_type``,
    ``moe_z_loss_coeff``, ``moe_router_dtype``, ``moe_input_jitter_eps``, ...) pass through to megatron-core.
    """
    key = f"{settings.key}.override_transformer_config"
    fields: dict[str, Any] = {}
    from_model: dict[str, Any] = {}
    notes: list[str] = []
    for name, value in settings.override_transformer_config.items():
        if name in REJECTED and value != REJECTED[name][0]:
            raise RLCoreError(f"{key}.{name}={value!r}: {REJECTED[name][1]}")
        if name in FROM_MODEL:
            from_model[name] = value
        elif name in KERNEL_CHOICES:
            if value != KERNEL_CHOICES[name]:
                notes.append(
                    f"{name}={value} is a kernel choice the local layer spec does not use (sequential experts, no "
                    "Transformer Engine): same numbers"
                )
        elif name != "moe_token_dispatcher_type" and (name.startswith("moe_") or name.startswith("expert_")):
            fields[name] = value
    asked = settings.override_transformer_config.get("moe_token_dispatcher_type", "allgather")
    if asked not in DISPATCHERS:
        raise RLCoreError(f"{key}.moe_token_dispatcher_type={asked!r}: choose one of {', '.join(DISPATCHERS)}")
    dispatcher = "allgather" if on_cpu else ("alltoall" if asked == "flex" else asked)
    if dispatcher != asked:
        notes.append(
            f"moe_token_dispatcher_type={asked}: the {dispatcher} dispatcher runs instead (megatron-core's {asked} "
            f"dispatcher needs {'CUDA streams' if asked == 'alltoall' else 'DeepEP or HybridEP kernels'}; every expert "
            "receives the same tokens)"
        )
    fields["moe_token_dispatcher_type"] = dispatcher
    return MoEOverrides(fields=fields, from_model=from_model, dispatcher=dispatcher, notes=tuple(notes))
