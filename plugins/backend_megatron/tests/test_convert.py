"""Hugging Face <-> megatron-core conversion: bit-exact round trips for Qwen2, Qwen3 and Llama layouts on
both megatron-core name specs, the fused layouts themselves, and tensor/pipeline sharding."""

from __future__ import annotations

import pytest
import torch
from rlcore_plugin_megatron.convert import (
    ModelSpec,
    from_stage,
    hf_to_megatron,
    megatron_to_hf,
    stage_layers,
    to_stage,
    tp_shard,
    tp_unshard,
)

from rlcore.errors import RLCoreError


def hf_model(model_type: str, *, tied: bool):
    """A tiny randomly initialised Hugging Face causal LM of ``model_type`` (4 query heads, 2 groups)."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

    config_cls = {"qwen2": Qwen2Config, "qwen3": Qwen3Config, "llama": LlamaConfig}[model_type]
    config = config_cls(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config)


def hf_state(model) -> dict[str, torch.Tensor]:
    """The model's parameters by name (a tied ``lm_head`` is not a separate parameter)."""
    return {name: param.detach() for name, param in model.named_parameters()}


CASES = [("qwen2", True), ("qwen2", False), ("qwen3", True), ("llama", False)]


@pytest.mark.parametrize(("model_type", "tied"), CASES)
@pytest.mark.parametrize("names", ["local", "te"])
def test_round_trip_is_bit_exact(model_type: str, tied: bool, names: str) -> None:
    """HF -> megatron -> HF gives back every tensor exactly, on both name specs."""
    model = hf_model(model_type, tied=tied)
    spec = ModelSpec.from_hf_config(model.config, "m")
    assert spec.qkv_bias == (model_type == "qwen2") and spec.qk_norm == (model_type == "qwen3") and spec.tied == tied
    state = hf_state(model)
    megatron = hf_to_megatron(state, spec, names=names)
    back = megatron_to_hf(megatron, spec, names=names)
    assert back.keys() == state.keys()
    for name, tensor in state.items():
        assert torch.equal(back[name], tensor), name


def test_megatron_names_of_both_specs() -> None:
    """The local spec keeps separate pre-norms; the Transformer Engine spec fuses them into the linear layers."""
    model = hf_model("qwen3", tied=False)
    spec = ModelSpec.from_hf_config(model.config, "m")
    local = hf_to_megatron(hf_state(model), spec, names="local")
    te = hf_to_megatron(hf_state(model), spec, names="te")
    assert {
        "decoder.layers.0.input_layernorm.weight",
        "decoder.layers.0.pre_mlp_layernorm.weight",
        "decoder.layers.0.self_attention.q_layernorm.weight",
        "output_layer.weight",
    } <= local.keys()
    assert {
        "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight",
        "decoder.layers.0.mlp.linear_fc1.layer_norm_weight",
    } <= te.keys()
    assert not any("input_layernorm" in name or "pre_mlp_layernorm" in name for name in te)


def test_qkv_is_grouped_per_query_group_and_fc1_is_gate_then_up() -> None:
    """linear_qkv rows: group g's query heads, then its key head, then its value head; fc1: gate then up."""
    model = hf_model("qwen2", tied=True)
    spec = ModelSpec.from_hf_config(model.config, "m")
    state = hf_state(model)
    megatron = hf_to_megatron(state, spec)
    qkv = megatron["decoder.layers.1.self_attention.linear_qkv.weight"]
    q, k, v = (state[f"model.layers.1.self_attn.{p}_proj.weight"] for p in "qkv")
    group = 2 * 16 + 2 * 16  # two query heads, one key head, one value head of 16 rows
    assert torch.equal(qkv[group : group + 32], q[32:64])
    assert torch.equal(qkv[group + 32 : group + 48], k[16:32])
    assert torch.equal(qkv[group + 48 : group + 64], v[16:32])
    fc1 = megatron["decoder.layers.1.mlp.linear_fc1.weight"]
    assert torch.equal(fc1[:96], state["model.layers.1.mlp.gate_proj.weight"])
    assert "output_layer.weight" not in megatron, "tied: no separate output layer"


@pytest.mark.parametrize("tp", [2, 4])
def test_tensor_parallel_shards_rejoin_exactly(tp: int) -> None:
    """Sharding every weight over ``tp`` ranks and joining the shards is the identity; fc1 shards hold their
    gate rows and then their up rows."""
    model = hf_model("qwen2", tied=False)
    spec = ModelSpec.from_hf_config(model.config, "m")
    megatron = hf_to_megatron(hf_state(model), spec)
    for name, tensor in megatron.items():
        shards = [tp_shard(name, tensor, rank, tp, spec) for rank in range(tp)]
        assert torch.equal(tp_unshard(name, shards, spec), tensor), name
    fc1 = megatron["decoder.layers.0.mlp.linear_fc1.weight"]
    first = tp_shard("decoder.layers.0.mlp.linear_fc1.weight", fc1, 0, tp, spec)
    rows = 96 // tp
    assert torch.equal(first[:rows], fc1[:rows]) and torch.equal(first[rows:], fc1[96 : 96 + rows])


def test_pipeline_stages_cover_the_model_once() -> None:
    """Two stages hold layers 0-1 and 2-3 under local names; a tied model's last stage gets a copy of the
    embedding as its output layer, which does not come back as a separate weight."""
    model = hf_model("qwen2", tied=True)
    spec = ModelSpec.from_hf_config(model.config, "m")
    megatron = hf_to_megatron(hf_state(model), spec)
    joined: dict[str, torch.Tensor] = {}
    for rank in range(2):
        layers = stage_layers(spec.num_layers, 2, rank, "pp")
        stage = to_stage(megatron, layers, first=rank == 0, last=rank == 1, spec=spec)
        assert ("output_layer.weight" in stage) == (rank == 1)
        assert ("decoder.layers.1.input_layernorm.weight" in stage) and (
            "decoder.layers.2.input_layernorm.weight" not in stage
        )
        joined.update(from_stage(stage, layers, first=rank == 0, spec=spec))
    assert joined.keys() == megatron.keys()
    with pytest.raises(RLCoreError, match="pp=3 must divide"):
        stage_layers(4, 3, 0, "pp")


def test_value_model_names() -> None:
    """A critic drops the LM head and gets a zero value head, exported as ``value_head.*``."""
    model = hf_model("llama", tied=False)
    spec = ModelSpec.from_hf_config(model.config, "m", value_head=True)
    state = {k: v for k, v in hf_state(model).items() if k != "lm_head.weight"}
    megatron = hf_to_megatron(state, spec)
    assert torch.equal(megatron["output_layer.weight"], torch.zeros(1, 64))
    assert {"value_head.weight", "value_head.bias"} <= megatron_to_hf(megatron, spec).keys()


def test_unsupported_models_are_rejected() -> None:
    """An architecture the converter does not know is an error naming the key."""
    from transformers import GPT2Config

    with pytest.raises(RLCoreError, match="actor_rollout_ref.model: model_type 'gpt2'"):
        ModelSpec.from_hf_config(GPT2Config(), "actor_rollout_ref.model")
