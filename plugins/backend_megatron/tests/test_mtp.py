"""Multi-token prediction on the Megatron backend (``actor_rollout_ref.model.mtp``): the MTP layers' weights, their
loss and its scale, the policy's log-probs (unchanged by MTP), the Hugging Face export, and the config errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch

from rlcore.errors import RLCoreError

MTP = "actor_rollout_ref.model.mtp"


class Settings(TrainingBackendContract):
    """The contract's small config for the ``megatron`` backend (not collected)."""

    component_name = "megatron"


@pytest.fixture(scope="module")
def mtp_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's tiny Qwen2 with one MiMo MTP layer (:func:`rlcore_testkit.tiny.add_mtp_layer`)."""
    from rlcore_testkit.tiny import add_mtp_layer

    path = tmp_path_factory.mktemp("mtp") / "model"
    shutil.copytree(tiny_model_dir, path)
    return add_mtp_layer(path)


def actor(model_dir: Path, **overrides: Any) -> Any:
    """An initialised rank-0 actor worker with dotted-key ``overrides``."""
    from rlcore.workers.actor import ActorRolloutRefWorker

    worker = ActorRolloutRefWorker(Settings.make_config(model_dir, **overrides), "actor", 0, 1)
    worker.init_model()
    return worker


def on(factor: float = 0.1, **more: Any) -> dict[str, Any]:
    """The overrides that train the MTP layer with ``factor``."""
    return {f"{MTP}.enable": True, f"{MTP}.enable_train": True, f"{MTP}.mtp_loss_scaling_factor": factor, **more}


def test_mtp_weights_convert_both_ways(mtp_model_dir: Path) -> None:
    """MiMo's ``model.mtp_layers.0.*`` -> megatron-core's ``mtp.layers.0.*`` -> back is the identity; ``input_proj``'s
    halves swap (megatron-core's ``eh_proj`` reads ``[embedding; hidden]``)."""
    from rlcore_plugin_megatron.convert import ModelSpec
    from rlcore_plugin_megatron.mtp import mtp_to_hf, mtp_to_megatron
    from safetensors.torch import load_file
    from transformers import AutoConfig

    spec = ModelSpec.from_hf_config(AutoConfig.from_pretrained(mtp_model_dir), "m")
    state = {n: t for n, t in load_file(str(mtp_model_dir / "model.safetensors")).items() if "mtp_layers" in n}
    mc = mtp_to_megatron(state, spec, 1)
    assert "mtp.layers.0.transformer_layer.self_attention.linear_qkv.weight" in mc
    hidden = spec.hidden_size
    proj = state["model.mtp_layers.0.input_proj.weight"]
    torch.testing.assert_close(mc["mtp.layers.0.eh_proj.weight"][:, :hidden], proj[:, hidden:], atol=0, rtol=0)
    back = mtp_to_hf(mc, spec, 1)
    assert back.keys() == state.keys()
    for name, tensor in state.items():
        torch.testing.assert_close(back[name], tensor, atol=0, rtol=0)


def test_log_probs_do_not_depend_on_mtp(mtp_model_dir: Path, tiny_tokenizer: Any) -> None:
    """The policy's log-probs with the MTP layer built and trained equal those of the same model without it."""
    batch = make_batch(tiny_tokenizer)
    results = []
    for overrides in ({}, on()):
        worker = actor(mtp_model_dir, **overrides)
        try:
            results.append(worker.compute_log_prob(batch)["old_log_probs"])
        finally:
            worker.shutdown()
    torch.testing.assert_close(results[1], results[0], atol=0, rtol=0)


def mtp_gradients(
    model_dir: Path, tiny_tokenizer: Any, factor: float, **more: Any
) -> tuple[dict[str, torch.Tensor], dict]:
    """The gradients of one forward-backward with a zero policy loss (only the MTP term), and the stats."""
    worker = actor(model_dir, **on(factor, **more))
    try:
        engine = worker.actor
        batch = make_batch(tiny_tokenizer)
        stats: dict[str, float] = {}

        def zero_policy_loss(index: int, micro: Any, output: Any) -> torch.Tensor:
            stats.update(output.stats)
            return output.log_probs.sum() * 0.0

        engine.forward_backward([batch], zero_policy_loss, temperature=1.0, with_entropy=False)
        grads = {n: p.grad.clone() for n, p in engine.module.named_parameters() if p.grad is not None}
        return grads, stats
    finally:
        worker.shutdown()


def test_mtp_loss_scales_its_gradient(mtp_model_dir: Path, tiny_tokenizer: Any) -> None:
    """The MTP term is ``mtp_loss_scaling_factor × loss``: twice the factor gives twice every gradient it causes,
    and its loss is logged under verl's name."""
    grads, stats = mtp_gradients(mtp_model_dir, tiny_tokenizer, 0.1)
    doubled, stats2 = mtp_gradients(mtp_model_dir, tiny_tokenizer, 0.2)
    assert stats["mtp_losses/mtp_1_loss"] > 0
    assert stats2["mtp_losses/mtp_1_loss"] == pytest.approx(stats["mtp_losses/mtp_1_loss"], abs=0)
    assert any(name.startswith("mtp.") for name in grads) and "embedding.word_embeddings.weight" in grads
    assert grads.keys() == doubled.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(doubled[name], 2 * grad, atol=1e-7, rtol=1e-5)
    assert max(float(g.abs().max()) for g in grads.values()) > 0


def test_detach_encoder_keeps_the_mtp_loss_out_of_the_decoder(mtp_model_dir: Path, tiny_tokenizer: Any) -> None:
    """``mtp.detach_encoder=true``: the MTP loss trains the MTP layer and the shared output layer only (no gradient
    reaches the decoder layers or, through the MTP layer's input, the embeddings), with the same loss."""
    grads, stats = mtp_gradients(mtp_model_dir, tiny_tokenizer, 0.1)
    detached, stats2 = mtp_gradients(mtp_model_dir, tiny_tokenizer, 0.1, **{f"{MTP}.detach_encoder": True})
    assert stats2 == stats
    reached = {name for name, grad in detached.items() if bool(grad.abs().max() > 0)}
    # the tiny model ties its output layer to the embedding, which the MTP logits still train
    head = "embedding.word_embeddings.weight" if "output_layer.weight" not in grads else "output_layer.weight"
    assert reached == {name for name in grads if name.startswith("mtp.")} | {head}
    assert bool(grads["decoder.layers.0.mlp.linear_fc2.weight"].abs().max() > 0)


def test_mtp_loss_matches_a_direct_computation(mtp_model_dir: Path, tiny_tokenizer: Any) -> None:
    """The logged MTP loss is the mean cross-entropy of the MTP layer's prediction of token ``t + 2`` over the
    positions whose target is a response token, computed here from Hugging Face's modules and MiMo's formula."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2RMSNorm

    _, stats = mtp_gradients(mtp_model_dir, tiny_tokenizer, 0.1)
    model = AutoModelForCausalLM.from_pretrained(mtp_model_dir, dtype=torch.float32)
    config = model.config
    state = {
        n.removeprefix("model.mtp_layers.0."): t
        for n, t in load_file(str(mtp_model_dir / "model.safetensors")).items()
        if "mtp_layers" in n
    }
    layer = Qwen2DecoderLayer(config, 0)
    layer.load_state_dict(
        {n: t for n, t in state.items() if n.startswith(("self_attn", "mlp", "input_layernorm", "post_"))}
    )
    norms = {name: Qwen2RMSNorm(config.hidden_size, config.rms_norm_eps) for name in ("token", "hidden", "final")}
    for name, norm in norms.items():
        norm.weight.data = state[f"{name}_layernorm.weight"]
    batch = make_batch(tiny_tokenizer)
    losses = []
    with torch.no_grad():
        for row in range(len(batch)):
            keep = batch["attention_mask"][row].bool()
            ids = batch["input_ids"][row][keep][None]
            length = int(batch["response_mask"][row].sum())
            prompt = ids.shape[1] - int(batch["attention_mask"][row, -batch["responses"].shape[1] :].sum())
            hidden = model.model(input_ids=ids).last_hidden_state  # final-normed, as megatron-core's decoder output
            embeds = model.model.embed_tokens(ids[:, 1:])
            mixed = (
                state["input_proj.weight"]
                @ torch.cat([norms["hidden"](hidden[:, :-1]), norms["token"](embeds)], -1)[0].T
            )
            positions = torch.arange(mixed.shape[1])[None]
            rotary = model.model.rotary_emb(mixed.T[None], positions)
            out = layer(mixed.T[None], position_embeddings=rotary, attention_mask=None, position_ids=positions)
            out = out[0] if isinstance(out, tuple) else out
            logits = model.lm_head(norms["final"](out))[0]
            # position t (t < len-2) predicts token t + 2; count it when that token is a response token
            targets = ids[0, 2:]
            counted = torch.arange(2, ids.shape[1]) >= prompt
            counted &= torch.arange(2, ids.shape[1]) < prompt + length
            ce = torch.nn.functional.cross_entropy(logits[:-1], targets, reduction="none")
            losses.append((ce[counted].sum(), counted.sum()))
    expected = sum(float(s) for s, _ in losses) / sum(int(c) for _, c in losses)
    assert stats["mtp_losses/mtp_1_loss"] == pytest.approx(expected, rel=1e-4)


def test_grpo_update_logs_the_mtp_loss_and_exports_mtp_weights(
    mtp_model_dir: Path, tiny_tokenizer: Any, tmp_path: Path
) -> None:
    """An actor update with MTP training logs ``actor/mtp_losses/mtp_1_loss``, changes the MTP weights, and the
    Hugging Face export keeps them (verl saves MTP weights with ``mtp.enable``) and loads back into the engine."""
    from safetensors.torch import load_file

    worker = actor(mtp_model_dir, **on(), **{"actor_rollout_ref.actor.optim.lr": 1e-2})
    try:
        batch = make_batch(tiny_tokenizer)
        batch["old_log_probs"] = worker.compute_log_prob(batch)["old_log_probs"]
        batch["advantages"] = torch.ones_like(batch["old_log_probs"])
        metrics = worker.update_actor(batch)
        worker.actor.save_hf(tmp_path / "hf", with_weights=True)
    finally:
        worker.shutdown()
    flat = metrics.meta["metrics"] if hasattr(metrics, "meta") else metrics
    assert flat["actor/mtp_losses/mtp_1_loss"] > 0
    saved = load_file(str(tmp_path / "hf" / "model.safetensors"))
    before = load_file(str(mtp_model_dir / "model.safetensors"))
    mtp_names = {n for n in before if n.startswith("model.mtp_layers.")}
    assert mtp_names <= saved.keys()
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["num_nextn_predict_layers"] == 1
    assert not torch.equal(
        saved["model.mtp_layers.0.input_proj.weight"], before["model.mtp_layers.0.input_proj.weight"]
    )
    reloaded = actor(tmp_path / "hf", **on())
    reloaded.shutdown()


def test_full_weights_leave_the_mtp_layers_out_and_load_back(mtp_model_dir: Path, tiny_tokenizer: Any) -> None:
    """The rollout's weights (``full_weights``) have no MTP layer; loading them back (the contract's round trip)
    keeps the engine's MTP weights and its log-probs."""
    worker = actor(mtp_model_dir, **on())
    try:
        engine = worker.actor
        state = engine.full_weights()
        assert state and not any("mtp" in name for name in state)
        before = {n: p.detach().clone() for n, p in engine.module.named_parameters() if n.startswith("mtp.")}
        batch = make_batch(tiny_tokenizer)
        expected = worker.compute_log_prob(batch)["old_log_probs"]
        engine.load_full_weights(state)
        torch.testing.assert_close(worker.compute_log_prob(batch)["old_log_probs"], expected, atol=0, rtol=0)
        for name, param in engine.module.named_parameters():
            if name.startswith("mtp."):
                torch.testing.assert_close(param.detach(), before[name], atol=0, rtol=0)
    finally:
        worker.shutdown()


def test_mtp_off_drops_the_mtp_weights(mtp_model_dir: Path, tmp_path: Path) -> None:
    """With ``mtp.enable=false`` (the default) the model is built without its MTP layer, the checkpoint's MTP
    weights are dropped (no strict-load error) and the export has neither them nor a layer count."""
    from safetensors.torch import load_file

    worker = actor(mtp_model_dir)
    try:
        assert not any(name.startswith("mtp.") for name, _ in worker.actor.module.named_parameters())
        worker.actor.save_hf(tmp_path / "hf", with_weights=True)
    finally:
        worker.shutdown()
    assert not any("mtp_layers" in name for name in load_file(str(tmp_path / "hf" / "model.safetensors")))
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["num_nextn_predict_layers"] == 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({f"{MTP}.enable_train": True}, r"mtp\.enable_train=true needs actor_rollout_ref\.model\.mtp\.enable=true"),
        ({f"{MTP}.enable_rollout": True}, r"mtp\.enable_rollout=true needs actor_rollout_ref\.model\.mtp\.enable=true"),
    ],
)
def test_mtp_config_errors_name_the_key(mtp_model_dir: Path, overrides: dict[str, Any], message: str) -> None:
    """Settings the engine cannot honour fail at start-up, naming the key."""
    with pytest.raises(RLCoreError, match=message):
        actor(mtp_model_dir, **overrides).shutdown()


def test_mtp_on_a_model_without_mtp_layers_is_an_error(tiny_model_dir: Path) -> None:
    """``mtp.enable=true`` on a model whose config declares no MTP layers is an error (as in verl)."""
    with pytest.raises(RLCoreError, match=r"mtp\.enable=true, but the model has no MTP layers"):
        actor(tiny_model_dir, **{f"{MTP}.enable": True}).shutdown()


@pytest.mark.parametrize(
    ("size", "moe", "message"),
    [
        ("tensor_model_parallel_size", False, r"enable=true with k\.tensor_model_parallel_size=2: .* not split"),
        ("pipeline_model_parallel_size", False, r"enable=true with k\.pipeline_model_parallel_size=2"),
        ("context_parallel_size", False, r"enable=true with k\.context_parallel_size=2"),
        (None, True, r"enable=true with a mixture-of-experts model"),
    ],
)
def test_mtp_layouts_the_engine_does_not_split_are_errors(size: str | None, moe: bool, message: str) -> None:
    """MTP layers are built on an unsplit dense model only; another layout or a MoE model is an error naming the
    key (before any model is built)."""
    from types import SimpleNamespace

    from rlcore_plugin_megatron.mtp import mtp_layers_to_build
    from rlcore_plugin_megatron.settings import resolve_settings

    settings = resolve_settings({size: 2} if size else {}, "k")
    mtp = SimpleNamespace(enable=True, enable_train=True, enable_rollout=False)
    with pytest.raises(RLCoreError, match=message):
        mtp_layers_to_build(mtp, SimpleNamespace(num_nextn_predict_layers=1), settings, is_moe=moe)
    assert (
        mtp_layers_to_build(mtp, SimpleNamespace(mtp_num_hidden_layers=2), resolve_settings({}, "k"), is_moe=False) == 2
    )


def test_two_grpo_steps_with_mtp(mtp_model_dir: Path, tmp_path: Path) -> None:
    """``rlcore run``: 2 GRPO steps of a Megatron actor training its MTP layer (verl's keys, detach_encoder on):
    the MTP loss is logged every step, the rollout (HF) is synced with the policy's weights (the MTP layer is not
    part of them) and the checkpoint holds the trained MTP layer."""
    import math

    from rlcore_testkit.runs import make_tiny_task, tiny_run

    from rlcore.tracking.sinks import read_metrics

    task = make_tiny_task(tmp_path / "task")
    last, run_dir = tiny_run(
        tmp_path / "run",
        mtp_model_dir,
        task,
        "actor_rollout_ref.actor.strategy=megatron",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.optim.lr=1e-2",
        "trainer.save_freq=2",
        *(f"{key}={value}" for key, value in on(0.3, **{f"{MTP}.detach_encoder": True}).items()),
    )
    rows = [row for row in read_metrics(run_dir) if "training/global_step" in row]
    assert [row["training/global_step"] for row in rows] == [1, 2]
    for row in rows:
        assert math.isfinite(row["actor/mtp_losses/mtp_1_loss"]) and row["actor/mtp_losses/mtp_1_loss"] > 0
    assert last["rollout/weight_checksum_diff"] <= 1e-6
    shard = torch.load(tmp_path / "run" / "ckpt" / "global_step_2" / "actor" / "model" / "tp00_pp00.pt")
    assert "mtp.layers.0.eh_proj.weight" in shard["state"]
