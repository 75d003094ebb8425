"""verl's ``actor_rollout_ref.actor.checkpoint.strict`` on the Megatron engine: true (the default) makes a checkpoint
weight the model does not use (MTP layers, ...) an error; false drops it, so the Hugging Face export omits it
(verl's lenient export). The FSDP engine refuses false."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
from safetensors.torch import load_file, save_file

from rlcore.errors import RLCoreError

KEY = "actor_rollout_ref.actor.checkpoint.strict"


class MegatronSettings(TrainingBackendContract):
    """The contract's small config for the ``megatron`` backend (not collected)."""

    component_name = "megatron"


@pytest.fixture
def mtp_model_dir(tiny_model_dir: Path, tmp_path: Path) -> Path:
    """The tiny model with the extra weights of a multi-token-prediction layer past its last layer."""
    import json

    model_dir = tmp_path / "mtp_model"
    shutil.copytree(tiny_model_dir, model_dir)
    layers = json.loads((model_dir / "config.json").read_text())["num_hidden_layers"]
    weights = model_dir / "model.safetensors"
    state = load_file(str(weights))
    hidden = state["model.norm.weight"].shape[0]
    state[f"model.layers.{layers}.eh_proj.weight"] = torch.ones(hidden, 2 * hidden)
    state["mtp.norm.weight"] = torch.ones(hidden)
    save_file(state, str(weights), metadata={"format": "pt"})
    return model_dir


def megatron_actor(model_dir: Path, **overrides: Any) -> Any:
    """An initialised rank-0 actor worker on the Megatron engine."""
    from rlcore.workers.actor import ActorRolloutRefWorker

    worker = ActorRolloutRefWorker(MegatronSettings.make_config(model_dir, **overrides), "actor", 0, 1)
    worker.init_model()
    return worker


def test_megatron_skips_the_unmapped_weights_only_when_not_strict(
    mtp_model_dir: Path, tiny_model_dir: Path, tiny_tokenizer: Any, tmp_path: Path
) -> None:
    """strict (the default) names the checkpoint's weights the model does not use; strict=false loads the rest (the
    same log-probs as the model without the extra weights) and the export leaves the unused weights out."""
    pytest.importorskip("megatron.core")
    with pytest.raises(
        RLCoreError,
        match=r"weights the model does not use: model\.layers\.\d+\.eh_proj\.weight, mtp\.norm\.weight \(set ",
    ):
        megatron_actor(mtp_model_dir)
    batch = make_batch(tiny_tokenizer)
    plain = megatron_actor(tiny_model_dir)
    try:
        expected = plain.compute_log_prob(batch)["old_log_probs"]
    finally:
        plain.shutdown()
    worker = megatron_actor(mtp_model_dir, **{KEY: False})
    try:
        torch.testing.assert_close(worker.compute_log_prob(batch)["old_log_probs"], expected, atol=0, rtol=0)
        worker.actor.save_hf(tmp_path / "hf", with_weights=True)
    finally:
        worker.shutdown()
    exported = set(load_file(str(tmp_path / "hf" / "model.safetensors")))
    assert "mtp.norm.weight" not in exported and not any("eh_proj" in name for name in exported)
    assert "model.norm.weight" in exported


def test_fsdp_refuses_a_lenient_checkpoint(tiny_model_dir: Path) -> None:
    """The FSDP engine loads and exports every weight of the model: strict=false would change nothing, so it is an
    error naming the key."""
    from rlcore.workers.actor import ActorRolloutRefWorker

    class FSDPSettings(TrainingBackendContract):
        component_name = "fsdp"

    with pytest.raises(RLCoreError, match=rf"{KEY}=false has no effect on the FSDP engine"):
        ActorRolloutRefWorker(FSDPSettings.make_config(tiny_model_dir, **{KEY: False}), "actor", 0, 1).init_model()
