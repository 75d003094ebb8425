"""The mixture-of-experts settings of a ``megatron`` section: expert parallel sizes, the ``moe_*`` fields of
``override_transformer_config`` (acted on, noted as kernel choices, or rejected naming the key), and the
errors for expert parallelism on a dense model."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from rlcore_plugin_megatron.convert import ModelSpec
from rlcore_plugin_megatron.model import moe_fields
from rlcore_plugin_megatron.moe_settings import moe_overrides
from rlcore_plugin_megatron.settings import layout_sizes, resolve_settings
from rlcore_testkit.tiny import build_moe_model, build_tokenizer

from rlcore.errors import RLCoreError

KEY = "actor_rollout_ref.actor.megatron"


def settings(**section: Any) -> Any:
    """The resolved section at :data:`KEY`."""
    return resolve_settings(section, KEY)


def test_expert_parallel_sizes() -> None:
    """EP is read; EP must divide the tensor × context × data-parallel ranks of a stage, as megatron-core
    requires."""
    assert settings(expert_model_parallel_size=2).ep == 2
    assert settings(expert_model_parallel_size=2, expert_tensor_parallel_size=1).ep == 2
    assert settings(tensor_model_parallel_size=2).etp is None  # dense models at TP 2 keep verl's default
    with pytest.raises(RLCoreError, match=rf"{KEY}.expert_model_parallel_size must be a positive integer"):
        settings(expert_model_parallel_size=0)
    assert layout_sizes(settings(expert_model_parallel_size=4), 8) == 8
    assert layout_sizes(settings(expert_model_parallel_size=2, pipeline_model_parallel_size=2), 4) == 2
    with pytest.raises(RLCoreError, match=rf"{KEY}.expert_model_parallel_size \(4\) must divide .* = 2 \(world 4"):
        layout_sizes(settings(expert_model_parallel_size=4, pipeline_model_parallel_size=2), 4)


def test_moe_fields_act_note_or_fail() -> None:
    """Training fields pass through; kernel choices are dropped with a note; the dispatcher is allgather on the
    CPU (noted when alltoall was asked) and honoured on CUDA; token dropping, megatron-core's own replay switch
    and MoE recomputation on the CPU are errors naming the key."""
    section = settings(
        override_transformer_config={
            "moe_router_dtype": "fp64",
            "moe_aux_loss_coeff": 0.01,
            "moe_permute_fusion": True,
            "moe_grouped_gemm": True,
            "moe_token_dispatcher_type": "alltoall",
        }
    )
    cpu = moe_overrides(section, on_cpu=True)
    assert cpu.fields == {
        "moe_router_dtype": "fp64",
        "moe_aux_loss_coeff": 0.01,
        "moe_token_dispatcher_type": "allgather",
    }
    assert any(note.startswith("moe_permute_fusion=True is a kernel choice") for note in cpu.notes)
    assert any(note.startswith("moe_grouped_gemm=True is a kernel choice") for note in cpu.notes)
    assert any("moe_token_dispatcher_type=alltoall: the allgather dispatcher runs instead" in n for n in cpu.notes)
    assert moe_overrides(section, on_cpu=False).dispatcher == "alltoall"
    for name, value, message in (
        ("moe_expert_capacity_factor", 1.0, "token dropping"),
        ("moe_enable_routing_replay", True, "router_replay.mode"),
        ("moe_token_dispatcher_type", "nccl", "choose one of allgather, alltoall, flex"),
    ):
        with pytest.raises(RLCoreError, match=rf"{KEY}.override_transformer_config.{name}.*{message}"):
            moe_overrides(settings(override_transformer_config={name: value}), on_cpu=True)


def test_model_fields_from_the_hugging_face_config() -> None:
    """Qwen3-MoE's config becomes megatron-core's MoE fields (no token dropping; softmax over the top-k logits
    for norm_topk_prob); an override of a model field must agree; EP on a dense model, EP not dividing the
    experts, experts split over tensor ranks (ETP other than 1, or null at TP 2), tensor parallelism with MoE
    and a ``moe_*`` field on a dense model are errors naming the key."""
    config = build_moe_model(build_tokenizer(None), num_experts=4, top_k=2).config
    spec = ModelSpec.from_hf_config(config, "actor_rollout_ref.model")
    cpu = torch.device("cpu")
    fields = moe_fields(spec, settings(expert_model_parallel_size=2), cpu)
    assert fields["num_moe_experts"] == 4 and fields["moe_router_topk"] == 2 and fields["moe_ffn_hidden_size"] == 32
    assert fields["moe_router_pre_softmax"] is False and fields["moe_expert_capacity_factor"] is None
    assert fields["moe_aux_loss_coeff"] == pytest.approx(0.001) and fields["moe_token_dispatcher_type"] == "allgather"
    assert moe_fields(spec, settings(override_transformer_config={"moe_router_topk": 2}), cpu)["moe_router_topk"] == 2
    with pytest.raises(
        RLCoreError, match=r"override_transformer_config.moe_router_topk=4: the model's config.json gives 2"
    ):
        moe_fields(spec, settings(override_transformer_config={"moe_router_topk": 4}), cpu)
    with pytest.raises(RLCoreError, match=r"expert_model_parallel_size=3 must divide the model's 4 experts"):
        moe_fields(spec, settings(expert_model_parallel_size=3), cpu)
    with pytest.raises(RLCoreError, match=rf"{KEY}.expert_tensor_parallel_size=2 .*set expert_tensor_parallel_size=1"):
        moe_fields(spec, settings(expert_tensor_parallel_size=2), cpu)
    with pytest.raises(
        RLCoreError, match=r"expert_tensor_parallel_size=None \(null means tensor_model_parallel_size=2"
    ):
        moe_fields(spec, settings(tensor_model_parallel_size=2), cpu)
    with pytest.raises(RLCoreError, match=r"tensor_model_parallel_size=2 with a mixture-of-experts model"):
        moe_fields(spec, settings(tensor_model_parallel_size=2, expert_tensor_parallel_size=1), cpu)
    dense = ModelSpec(
        num_layers=2, hidden_size=64, ffn_hidden_size=96, vocab_size=128, num_heads=4, num_query_groups=2,
        head_dim=16, qkv_bias=False, qk_norm=True, tied=True,
    )  # fmt: skip
    assert moe_fields(dense, settings(), cpu) == {}
    with pytest.raises(RLCoreError, match=rf"{KEY}.expert_model_parallel_size=2: expert parallelism needs a mixture"):
        moe_fields(dense, settings(expert_model_parallel_size=2), cpu)
    with pytest.raises(
        RLCoreError, match=rf"{KEY}.override_transformer_config.moe_aux_loss_coeff: a mixture-of-expert"
    ):
        moe_fields(dense, settings(override_transformer_config={"moe_aux_loss_coeff": 0.1}), cpu)
