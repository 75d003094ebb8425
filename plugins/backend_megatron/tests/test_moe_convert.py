"""Qwen3-MoE and Qwen2-MoE <-> megatron-core conversion: bit-exact round trips in both directions on both name
specs, the expert and shared-expert layouts, expert-parallel sharding, and the errors for what the converter does
not map."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from rlcore_plugin_megatron.convert import ModelSpec, hf_to_megatron, megatron_to_hf, partition_dim
from rlcore_plugin_megatron.moe_convert import ep_global_name, ep_shard, expert_of
from rlcore_testkit.tiny import build_moe_model, build_tokenizer

from rlcore.errors import RLCoreError


@pytest.fixture(scope="module")
def moe_model() -> Any:
    """The tiny Qwen3-MoE of ``rlcore_testkit.tiny`` (2 layers, 8 experts, top-2), untied."""
    return build_moe_model(build_tokenizer(None), tie_word_embeddings=False)


def exact(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> None:
    """Same names, and every tensor bit-for-bit equal."""
    assert left.keys() == right.keys()
    for name, tensor in left.items():
        assert torch.equal(tensor, right[name]), name


@pytest.mark.parametrize("names", ["local", "te"])
@pytest.mark.parametrize("family", ["qwen3_moe", "qwen2_moe"])
def test_round_trips_are_bit_exact(moe_model: Any, names: str, family: str) -> None:
    """HF -> megatron -> HF and megatron -> HF -> megatron give back every tensor bit for bit."""
    model = moe_model if family == "qwen3_moe" else build_moe_model(build_tokenizer(None), family=family)
    spec = ModelSpec.from_hf_config(model.config, "m")
    hf = {name: t.detach() for name, t in model.state_dict().items() if not (spec.tied and name == "lm_head.weight")}
    megatron = hf_to_megatron(hf, spec, names=names)
    exact(megatron_to_hf(megatron, spec, names=names), hf)
    exact(hf_to_megatron(megatron_to_hf(megatron, spec, names=names), spec, names=names), megatron)


def test_expert_layout(moe_model: Any) -> None:
    """The router is the gate; expert e's linear_fc1 is gate_up_proj[e] (gate rows first) and its linear_fc2
    is down_proj[e]; the grouped (te) form numbers the weights; the spec reads the MoE sizes."""
    spec = ModelSpec.from_hf_config(moe_model.config, "m")
    assert (spec.num_experts, spec.moe_topk, spec.moe_ffn_hidden_size, spec.norm_topk_prob) == (8, 2, 32, True)
    assert spec.qk_norm and spec.router_aux_loss_coef == pytest.approx(0.001)
    hf = moe_model.state_dict()
    local = hf_to_megatron(hf, spec)
    te = hf_to_megatron(hf, spec, names="te")
    layer = moe_model.model.layers[1].mlp
    assert torch.equal(local["decoder.layers.1.mlp.router.weight"], layer.gate.weight)
    gate_up, down = layer.experts.gate_up_proj, layer.experts.down_proj
    assert torch.equal(local["decoder.layers.1.mlp.experts.local_experts.3.linear_fc1.weight"], gate_up[3])
    assert torch.equal(local["decoder.layers.1.mlp.experts.local_experts.3.linear_fc1.weight"][:32], gate_up[3, :32])
    assert torch.equal(local["decoder.layers.1.mlp.experts.local_experts.5.linear_fc2.weight"], down[5])
    assert torch.equal(te["decoder.layers.1.mlp.experts.linear_fc1.weight3"], gate_up[3])
    assert "decoder.layers.1.pre_mlp_layernorm.weight" in te  # the router reads the normalised input
    assert partition_dim("decoder.layers.1.mlp.experts.local_experts.3.linear_fc1.weight", spec) is None
    assert partition_dim("decoder.layers.1.mlp.router.weight", spec) is None


@pytest.mark.parametrize("names", ["local", "te"])
def test_expert_parallel_shards_join_back(moe_model: Any, names: str) -> None:
    """Each of 4 expert-parallel ranks holds 2 experts numbered from 0 (rank 1: experts 2 and 3) and every
    other weight; renamed back to global numbers, the shards are the full state again."""
    spec = ModelSpec.from_hf_config(moe_model.config, "m")
    full = hf_to_megatron(moe_model.state_dict(), spec, names=names)
    joined: dict[str, torch.Tensor] = {}
    for rank in range(4):
        shard = ep_shard(full, rank, 4, spec.num_experts)
        assert {expert_of(name) for name in shard} == {None, 0, 1}
        joined.update({ep_global_name(name, rank, 4, spec.num_experts): t for name, t in shard.items()})
        if rank == 1 and names == "local":
            assert torch.equal(
                shard["decoder.layers.0.mlp.experts.local_experts.0.linear_fc2.weight"],
                full["decoder.layers.0.mlp.experts.local_experts.2.linear_fc2.weight"],
            )
    exact(joined, full)
    with pytest.raises(RLCoreError, match="expert_model_parallel_size=3 must divide the model's 8 experts"):
        ep_shard(full, 0, 3, spec.num_experts)


def test_shared_expert_layout() -> None:
    """Qwen2-MoE: qkv biases, no q/k norms; the shared expert's gate and up rows are linear_fc1 (gate first), its
    down projection linear_fc2, its sigmoid gate megatron-core's gate_weight."""
    model = build_moe_model(build_tokenizer(None), family="qwen2_moe")
    spec = ModelSpec.from_hf_config(model.config, "m")
    assert spec.shared_expert_ffn == 64 and spec.qkv_bias and not spec.qk_norm
    state = hf_to_megatron(model.state_dict(), spec)
    shared = model.model.layers[0].mlp.shared_expert
    fc1 = state["decoder.layers.0.mlp.shared_experts.linear_fc1.weight"]
    assert torch.equal(fc1, torch.cat([shared.gate_proj.weight, shared.up_proj.weight]))
    assert torch.equal(state["decoder.layers.0.mlp.shared_experts.linear_fc2.weight"], shared.down_proj.weight)
    gate = model.model.layers[0].mlp.shared_expert_gate.weight
    assert torch.equal(state["decoder.layers.0.mlp.shared_experts.gate_weight"], gate)


def test_what_the_converter_does_not_map(moe_model: Any) -> None:
    """A MoE model with dense layers is named as unsupported; a missing expert is named."""
    dense_layers = build_moe_model(build_tokenizer(None)).config
    dense_layers.mlp_only_layers = [1]
    with pytest.raises(RLCoreError, match="actor_rollout_ref.model: a qwen3_moe model with dense layers"):
        ModelSpec.from_hf_config(dense_layers, "actor_rollout_ref.model")
    spec = ModelSpec.from_hf_config(moe_model.config, "m")
    full = hf_to_megatron(moe_model.state_dict(), spec)
    del full["decoder.layers.0.mlp.experts.local_experts.6.linear_fc1.weight"]
    with pytest.raises(RLCoreError, match=r"expected experts 0..7 .* \[0, 1, 2, 3, 4, 5, 7\] \(linear_fc1\)"):
        megatron_to_hf(full, spec)
