"""The DeepSpeed engine trains exactly as the FSDP engine: one update on the same data gives the same
gradient norm and the same new log-probs (within 1e-4), at every ZeRO stage, padded and packed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.attention import AttentionProbe
from rlcore_testkit.sequence_parallel import global_batch, run_case


@pytest.fixture(scope="module")
def fsdp(tiny_model_dir: Path) -> dict[str, Any]:
    """The FSDP engine's padded update."""
    return run_case("fsdp", tiny_model_dir, packed=False)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_one_update_equals_fsdp(tiny_model_dir: Path, fsdp: dict[str, Any], stage: int) -> None:
    zero = {
        f"{section}.deepspeed_config.zero_stage": stage
        for section in ("actor_rollout_ref.actor", "actor_rollout_ref.ref")
    }
    ours = run_case("deepspeed", tiny_model_dir, packed=False, overrides=zero)
    mask = fsdp["mask"].bool()
    torch.testing.assert_close(ours["log_probs"][mask], fsdp["log_probs"][mask], atol=1e-5, rtol=0)
    assert ours["grad_norm"] == pytest.approx(fsdp["grad_norm"], rel=1e-5)
    assert not torch.allclose(ours["new_log_probs"][mask], ours["log_probs"][mask]), "the update changed nothing"
    torch.testing.assert_close(ours["new_log_probs"][mask], fsdp["new_log_probs"][mask], atol=1e-4, rtol=0)


def test_packed_update_equals_the_padded_one_without_a_square_mask(tiny_model_dir: Path, fsdp: dict[str, Any]) -> None:
    """``use_remove_padding``: the packed actor and critic give the padded FSDP run's numbers, and no packed
    micro-batch gets an ``nnz × nnz`` mask: every attention call is causal without a mask, none spans a
    packed row of several sequences (:mod:`rlcore.modelkit.packed_attention`)."""
    with AttentionProbe() as probe:
        ours = run_case("deepspeed", tiny_model_dir, packed=True)
    mask = fsdp["mask"].bool()
    for key in ("log_probs", "entropy"):
        torch.testing.assert_close(ours[key][mask], fsdp[key][mask], atol=1e-5, rtol=0)
    assert ours["grad_norm"] == pytest.approx(fsdp["grad_norm"], rel=1e-5)
    torch.testing.assert_close(ours["new_log_probs"][mask], fsdp["new_log_probs"][mask], atol=1e-4, rtol=0)
    torch.testing.assert_close(ours["values"], fsdp["values"], atol=1e-5, rtol=0)
    assert probe.calls and all(call.causal and not call.masked for call in probe.calls)
    assert max(call.query[2] for call in probe.calls) == max(global_batch(tiny_model_dir)["attention_mask"].sum(-1))


def test_zero3_gathers_the_weights_bucket_by_bucket(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, tiny_tokenizer: object
) -> None:
    """With buckets of 5000 elements (several per layer) ZeRO-3 exports exactly the checkpoint's weights, and
    loading them back after an update restores the original log-probs."""
    import rlcore_plugin_deepspeed.engine as engine_module
    from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
    from safetensors.torch import load_file

    from rlcore.workers.actor import ActorRolloutRefWorker

    monkeypatch.setattr(engine_module, "GATHER_BUCKET_NUMEL", 5000)
    settings = type("Settings", (TrainingBackendContract,), {"component_name": "deepspeed"})
    config = settings.make_config(tiny_model_dir, **{"actor_rollout_ref.actor.deepspeed_config.zero_stage": 3})
    worker = ActorRolloutRefWorker(config, "actor", 0, 1)
    try:
        worker.init_model()
        engine = worker.actor
        assert len(list(engine._buckets(engine._named_tensors()))) > 10
        original = load_file(str(tiny_model_dir / "model.safetensors"))
        exported = engine.full_weights(only_rank0=True)
        assert set(original) <= set(exported)
        for name, tensor in original.items():
            torch.testing.assert_close(exported[name], tensor, atol=0, rtol=0)
        batch = make_batch(tiny_tokenizer)
        before = worker.compute_log_prob(batch)["old_log_probs"]
        batch["old_log_probs"], batch["advantages"] = before, torch.ones_like(before)
        worker.update_actor(batch)
        assert not torch.allclose(worker.compute_log_prob(batch)["old_log_probs"], before)
        engine.load_full_weights(exported)
        torch.testing.assert_close(worker.compute_log_prob(batch)["old_log_probs"], before, atol=1e-6, rtol=0)
    finally:
        worker.shutdown()


def test_padded_packed_micro_batches_give_the_same_update(tiny_model_dir: Path, fsdp: dict[str, Any]) -> None:
    """``pad_to_length`` with a bucket of 64 tokens on the actor, the reference and the critic: the packed rows
    reach the model padded to a multiple of 64 (no micro-batch has that many tokens), and every number equals the
    padded FSDP run's."""
    from transformers import AutoConfig

    bucket = {"pad_to_length": True, "pad_to_length_bucket": 64}
    overrides = {
        f"{role}.{key}": value for role in ("actor_rollout_ref.actor", "critic") for key, value in bucket.items()
    }
    with AttentionProbe() as probe:
        ours = run_case("deepspeed", tiny_model_dir, packed=True, overrides=overrides)
    mask = fsdp["mask"].bool()
    for key in ("log_probs", "entropy"):
        torch.testing.assert_close(ours[key][mask], fsdp[key][mask], atol=1e-5, rtol=0)
    assert ours["grad_norm"] == pytest.approx(fsdp["grad_norm"], rel=1e-5)
    torch.testing.assert_close(ours["new_log_probs"][mask], fsdp["new_log_probs"][mask], atol=1e-4, rtol=0)
    torch.testing.assert_close(ours["values"], fsdp["values"], atol=1e-5, rtol=0)
    hidden = AutoConfig.from_pretrained(tiny_model_dir).hidden_size
    rows = {shape[1] for shape in probe.shapes if len(shape) == 3 and shape[0] == 1 and shape[2] == hidden}
    # the embedded packed rows are the longest [1, L, hidden] tensors (the attention's buckets are single sequences)
    assert max(rows) % 64 == 0, rows
