"""Building megatron-core models for a Hugging Face checkpoint: the process's model-parallel groups, the
``TransformerConfig`` and one pipeline stage of a ``GPTModel`` on the local layer spec."""

from __future__ import annotations

import dataclasses
import logging
import warnings
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from rlcore.api import ModelConfig, RLCoreError, config_overrides
from rlcore_plugin_megatron.attention import CausalAttention
from rlcore_plugin_megatron.convert import ModelSpec
from rlcore_plugin_megatron.sequence_parallel import block_spec, sequence_parallel_spec
from rlcore_plugin_megatron.settings import MegatronSettings

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from megatron.core.models.gpt.gpt_model import GPTModel

#: megatron-core's warnings that are expected with the local layer spec on any machine without Transformer
#: Engine or Apex, and its own internal deprecations; hidden so that real warnings stay visible
for _message in (
    r".*Transformer Engine and Apex are not installed",
    r"Apex is not installed",
    r".*tp_group is None",
    r".*MLP requires ffn_hidden_size",
    r"full scope is deprecated",
    r".*module is deprecated",
):
    warnings.filterwarnings("ignore", message=_message)

#: the model-parallel layout this process initialised: (tp, pp, cp, ep), the default group it was built
#: on, and how many engines use it
_PARALLEL_STATE: dict[str, Any] = {"sizes": None, "world": None, "users": 0, "key": ""}


def acquire_parallel_state(settings: MegatronSettings) -> None:
    """Initialise megatron-core's model-parallel groups for ``settings`` (or join the ones another engine of
    this process built with the same sizes). Every engine must :func:`release_parallel_state` when closed.

    megatron-core keeps one layout per process, so the actor, the reference model and a colocated critic
    must agree on it; a different layout is an error naming both keys.
    """
    from megatron.core import parallel_state

    sizes = (settings.tp, settings.pp, settings.cp, settings.ep)
    world = dist.group.WORLD
    if _PARALLEL_STATE["users"] and _PARALLEL_STATE["world"] is world:
        if _PARALLEL_STATE["sizes"] != sizes:
            raise RLCoreError(
                f"{settings.key} asks for tensor/pipeline/context/expert parallel sizes {sizes}, but this process already "
                f"runs an engine with {_PARALLEL_STATE['sizes']} ({_PARALLEL_STATE['key']}); megatron-core allows one "
                "layout per process: set the same sizes"
            )
        _PARALLEL_STATE["users"] += 1
        return
    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=settings.tp,
        pipeline_model_parallel_size=settings.pp,
        context_parallel_size=settings.cp,
        expert_model_parallel_size=settings.ep,
        expert_tensor_parallel_size=1,
    )
    _PARALLEL_STATE.update(sizes=sizes, world=world, users=1, key=settings.key)


def release_parallel_state() -> None:
    """Drop one user of the model-parallel groups; the last one destroys them."""
    if _PARALLEL_STATE["users"] == 0:
        return
    _PARALLEL_STATE["users"] -= 1
    if _PARALLEL_STATE["users"] == 0:
        from megatron.core import parallel_state

        if dist.is_initialized():
            parallel_state.destroy_model_parallel()
        _PARALLEL_STATE.update(sizes=None, world=None, key="")


def model_path(model_config: ModelConfig, key: str) -> str:
    """The ``path`` of the typed model section at ``key``; unset is an error naming ``key.path``."""
    if not model_config.path:
        raise RLCoreError(f"{key}.path is not set: give a Hugging Face model directory or hub name")
    return model_config.path


def load_hf_config(model_config: ModelConfig, key: str) -> Any:
    """The Hugging Face config of the typed model section at ``key`` (``path``, ``override_config``,
    ``trust_remote_code``); errors name ``key.path``."""
    from transformers import AutoConfig

    path = model_path(model_config, key)
    try:
        hf_config = AutoConfig.from_pretrained(path, trust_remote_code=bool(model_config.trust_remote_code))
    except (OSError, ValueError) as exc:
        raise RLCoreError(f"{key}.path={path!r} cannot be loaded: {exc}") from exc
    for name, value in config_overrides(model_config, key).items():
        setattr(hf_config, name, value)
    return hf_config


#: the config key that makes the Hugging Face load lenient (verl's name)
STRICT_KEY = "actor_rollout_ref.actor.checkpoint.strict"


def load_hf_state(
    model_config: ModelConfig, key: str, hf_config: Any, *, strict: bool | None = None, unused_ok: str = ""
) -> dict[str, torch.Tensor]:
    """The float32 Hugging Face state dict of the causal LM at ``key.path`` (on the CPU).

    ``strict`` (``checkpoint.strict``, verl's key): a weight of the checkpoint the model does not use (MTP layers,
    ...) or a weight of the model the checkpoint lacks is an error naming them; false logs them and goes on (the
    unused weights are dropped, so the Hugging Face export leaves them out, as verl's lenient export does); None
    (the critic's and reward model's load, whose checkpoint may hold a value head) leaves it to transformers.
    Unused weights whose names start with ``unused_ok`` (the MTP layers, read apart) are never a problem.
    """
    from transformers import AutoModelForCausalLM

    path = model_path(model_config, key)
    try:
        loaded: Any = AutoModelForCausalLM.from_pretrained(
            path,
            config=hf_config,
            dtype=torch.float32,
            trust_remote_code=bool(model_config.trust_remote_code),
            output_loading_info=True,
        )
    except (OSError, ValueError) as exc:
        raise RLCoreError(f"{key}.path={path!r} cannot be loaded: {exc}") from exc
    model, info = loaded  # (the model, the names transformers dropped or initialised)
    state = {name: tensor.detach() for name, tensor in model.state_dict().items()}
    if strict is None:
        return state
    problems = [
        f"{what}: {', '.join(sorted(names)[:8])}{', ...' if len(names) > 8 else ''}"
        for what, names in (
            (
                "weights the model does not use",
                [name for name in info.get("unexpected_keys") or [] if not (unused_ok and name.startswith(unused_ok))],
            ),
            ("weights the checkpoint lacks", info.get("missing_keys") or []),
        )
        if names
    ]
    if problems and strict:
        raise RLCoreError(
            f"{key}.path={path!r}: {'; '.join(problems)} (set {STRICT_KEY}=false to load the rest, as verl does)"
        )
    if problems:
        logger.warning("%s=false: %s.path=%r: %s", STRICT_KEY, key, path, "; ".join(problems))
    return state


def rope_base(hf_config: Any, key: str) -> float:
    """RoPE's ``theta`` of ``hf_config``; a scaled RoPE (``rope_scaling``/``rope_type`` other than
    ``default``) is an error naming ``key``."""
    parameters = getattr(hf_config, "rope_parameters", None) or getattr(hf_config, "rope_scaling", None) or {}
    rope_type = parameters.get("rope_type", parameters.get("type", "default"))
    if rope_type not in (None, "default"):
        raise RLCoreError(f"{key}: RoPE scaling ({rope_type!r}) is not supported by the megatron backend")
    return float(parameters.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0)))


def moe_fields(spec: ModelSpec, settings: MegatronSettings, device: torch.device) -> dict[str, Any]:
    """megatron-core's mixture-of-experts fields for ``spec`` (empty for a dense model): Qwen3-MoE's router
    (softmax over all experts, then the top-k; with ``norm_topk_prob`` the k weights renormalised, which is
    megatron-core's softmax over the top-k logits, else its ``moe_router_pre_softmax``), sequential experts,
    no token dropping, the load-balancing loss at ``router_aux_loss_coef``, Qwen2-MoE's sigmoid-gated shared
    expert (``moe_shared_expert_intermediate_size``, ``moe_shared_expert_gate``), then the section's ``moe_*``
    overrides (:func:`~rlcore_plugin_megatron.moe_settings.moe_overrides`). A model field set to another value
    than the Hugging Face config's, or expert parallelism on a dense model, is an error naming the key."""
    from rlcore_plugin_megatron.moe_settings import moe_overrides

    overrides = moe_overrides(settings, on_cpu=device.type == "cpu")
    if not spec.is_moe:
        if settings.ep > 1:
            raise RLCoreError(
                f"{settings.key}.expert_model_parallel_size={settings.ep}: expert parallelism needs a mixture-of-experts "
                "model (qwen3_moe), and this model is dense; set it to 1"
            )
        moe_keys = [name for name in settings.override_transformer_config if name.startswith("moe_")]
        if moe_keys:
            raise RLCoreError(
                f"{settings.key}.override_transformer_config.{moe_keys[0]}: a mixture-of-experts field, and this model "
                "is dense; remove it"
            )
        return {}
    etp = settings.tp if settings.etp is None else settings.etp
    if etp != 1:
        raise RLCoreError(
            f"{settings.key}.expert_tensor_parallel_size={settings.etp} (null means tensor_model_parallel_size="
            f"{settings.tp} in megatron-core): rlcore's Megatron engine does not split experts over tensor-parallel "
            "ranks; set expert_tensor_parallel_size=1"
        )
    if settings.tp > 1:
        raise RLCoreError(
            f"{settings.key}.tensor_model_parallel_size={settings.tp} with a mixture-of-experts model: megatron-core "
            "needs sequence parallelism with tensor-parallel MoE layers, which the local layer spec cannot do; use "
            "expert_model_parallel_size instead and set tensor_model_parallel_size=1"
        )
    if spec.num_experts % settings.ep:
        raise RLCoreError(
            f"{settings.key}.expert_model_parallel_size={settings.ep} must divide the model's {spec.num_experts} experts"
        )
    fields: dict[str, Any] = {
        "num_moe_experts": spec.num_experts,
        "moe_router_topk": spec.moe_topk,
        "moe_ffn_hidden_size": spec.moe_ffn_hidden_size,
        "moe_router_score_function": "softmax",
        "moe_router_pre_softmax": not spec.norm_topk_prob,
        "moe_router_load_balancing_type": "aux_loss" if spec.router_aux_loss_coef > 0 else "none",
        "moe_aux_loss_coeff": spec.router_aux_loss_coef,
        "moe_expert_capacity_factor": None,
        "moe_grouped_gemm": False,
        "moe_router_dtype": "fp32",
        "moe_shared_expert_intermediate_size": spec.shared_expert_ffn or None,
        "moe_shared_expert_gate": bool(spec.shared_expert_ffn),
        "expert_model_parallel_size": settings.ep,
        "expert_tensor_parallel_size": 1,
    }
    for name, value in overrides.from_model.items():
        if fields.get(name) != value:
            raise RLCoreError(
                f"{settings.key}.override_transformer_config.{name}={value!r}: the model's config.json gives "
                f"{fields.get(name)!r}; megatron-core's MoE layers must match the Hugging Face model"
            )
    fields.update(overrides.fields)
    return fields


#: megatron-core's activation recomputation that ``model.enable_gradient_checkpointing=true`` asks for: each
#: transformer layer's forward pass runs again in the backward pass (as Hugging Face gradient checkpointing does)
GRADIENT_CHECKPOINTING = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}


def transformer_config(
    spec: ModelSpec,
    hf_config: Any,
    settings: MegatronSettings,
    key: str,
    device: torch.device,
    *,
    gradient_checkpointing: bool = False,
) -> Any:
    """megatron-core's ``TransformerConfig`` for ``spec`` in float32 without dropout, with the section's
    ``override_transformer_config`` applied (an unknown field is an error naming it; the mixture-of-experts
    fields go through :func:`moe_fields`). ``gradient_checkpointing`` (``model.enable_gradient_checkpointing``)
    recomputes every layer (:data:`GRADIENT_CHECKPOINTING`) unless the overrides set a ``recompute_*`` field
    themselves; recomputation runs on the CPU too (:mod:`rlcore_plugin_megatron.cpu_compat`)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    fields = {
        "num_layers": spec.num_layers,
        "hidden_size": spec.hidden_size,
        "ffn_hidden_size": spec.ffn_hidden_size,
        "num_attention_heads": spec.num_heads,
        "num_query_groups": spec.num_query_groups,
        "kv_channels": spec.head_dim,
        "tensor_model_parallel_size": settings.tp,
        "pipeline_model_parallel_size": settings.pp,
        "context_parallel_size": settings.cp,
        "sequence_parallel": settings.sequence_parallel and settings.tp > 1,
        "normalization": "RMSNorm",
        "layernorm_epsilon": float(getattr(hf_config, "rms_norm_eps", 1e-6)),
        "gated_linear_unit": True,
        "activation_func": torch.nn.functional.silu,
        "add_bias_linear": False,
        "add_qkv_bias": spec.qkv_bias,
        "qk_layernorm": spec.qk_norm,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "params_dtype": torch.float32,
        "pipeline_dtype": torch.float32,
        "use_cpu_initialization": True,
        "perform_initialization": False,
        "bias_activation_fusion": False,
        "bias_dropout_fusion": False,
        "masked_softmax_fusion": False,
        "gradient_accumulation_fusion": False,
        "persist_layer_norm": False,
        "apply_rope_fusion": False,
    }
    overridden = settings.override_transformer_config
    if gradient_checkpointing and not any(name.startswith("recompute_") for name in overridden):
        fields.update(GRADIENT_CHECKPOINTING)
    known = {field.name for field in dataclasses.fields(TransformerConfig)}
    for name, value in settings.override_transformer_config.items():
        if name not in known:
            raise RLCoreError(
                f"{settings.key}.override_transformer_config.{name} is not a megatron-core TransformerConfig field"
            )
        if not (name.startswith("moe_") or name.startswith("expert_") or name == "overlap_moe_expert_parallel_comm"):
            fields[name] = value
    fields.update(moe_fields(spec, settings, device))
    return TransformerConfig(**fields)


class ValueHead(nn.Module):
    """A critic's scalar head in place of a ``GPTModel``'s output layer: ``Linear(hidden, 1)``, zero-initialised
    (every initial value 0) and replicated on every tensor-parallel rank. With sequence parallelism
    (``gather_sequence``) it first gathers the sequence the tensor-parallel ranks split, as the language-model
    head it replaces does."""

    def __init__(self, hidden_size: int, gather_sequence: bool = False) -> None:
        """A zero ``[1, hidden]`` weight and a zero bias."""
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1, hidden_size))
        self.bias = nn.Parameter(torch.zeros(1))
        self.gather_sequence = gather_sequence

    def forward(
        self, hidden: torch.Tensor, weight: torch.Tensor | None = None, runtime_gather_output: bool | None = None
    ) -> tuple[torch.Tensor, None]:
        """Values ``[s, b, 1]`` of hidden states ``[s, b, h]`` (this rank's ``[s/tp, b, h]`` with sequence
        parallelism), called as ``GPTModel`` calls its output layer."""
        if self.gather_sequence:
            from megatron.core.tensor_parallel import gather_from_sequence_parallel_region

            # every rank computes the values of the whole sequence: its gradient is the rank's slice, not a part
            hidden = gather_from_sequence_parallel_region(hidden, tensor_parallel_output_grad=False)
        return nn.functional.linear(hidden, self.weight, self.bias), None


def build_stage(
    spec: ModelSpec,
    config: Any,
    hf_config: Any,
    key: str,
    *,
    first: bool,
    last: bool,
    detach_mtp_encoder: bool = False,
) -> GPTModel:
    """This rank's pipeline stage of a ``GPTModel`` on megatron-core's local layer spec (no Transformer
    Engine), with full (gathered) logits on every tensor-parallel rank; its core attention is
    :class:`~rlcore_plugin_megatron.attention.CausalAttention` (torch's fused attention, also over the context-parallel
    group when ``config.context_parallel_size > 1``).

    Tied embeddings are tied by megatron-core on a single stage; over several stages the last stage gets
    its own output layer, which the engine keeps equal to the embedding. A critic's last stage gets a
    :class:`ValueHead`. With ``config.mtp_num_layers`` the last stage gets megatron-core's MTP block and
    :func:`rlcore_plugin_megatron.mtp.install` (``detach_mtp_encoder``: ``mtp.detach_encoder``).
    """
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec, get_gpt_mtp_block_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    layer_spec = get_gpt_layer_local_spec(
        num_experts=spec.num_experts or None,
        normalization="RMSNorm",
        qk_layernorm=spec.qk_norm,
    )
    layer_spec.submodules.self_attention.submodules.core_attention = CausalAttention
    with_mtp = bool(config.mtp_num_layers) and last
    mtp_spec = get_gpt_mtp_block_spec(config, layer_spec, use_transformer_engine=False) if with_mtp else None
    block: Any = layer_spec
    if config.sequence_parallel:
        block, mtp_spec = block_spec(config, layer_spec), sequence_parallel_spec(mtp_spec)
    model = GPTModel(
        config=config,
        transformer_layer_spec=block,
        vocab_size=spec.vocab_size,
        max_sequence_length=int(getattr(hf_config, "max_position_embeddings", 4096)),
        pre_process=first,
        post_process=last,
        parallel_output=False,
        share_embeddings_and_output_weights=spec.tied and first and last,
        position_embedding_type="rope",
        rotary_base=rope_base(hf_config, key),
        mtp_block_spec=mtp_spec,
    )
    if with_mtp:
        from rlcore_plugin_megatron.mtp import install

        install(model, detach_mtp_encoder)
    if spec.value_head and last:
        model.output_layer = ValueHead(spec.hidden_size, gather_sequence=config.sequence_parallel)
    return model
