"""Worker checkpoints: sharded (DCP) model and optimizer, per-rank extra state, exact continuation, the
Hugging Face export, and loading at another world size."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from rlcore.api.batch import Batch
from rlcore.errors import RLCoreError


def full_state(worker: Any) -> dict[str, torch.Tensor]:
    """A detached copy of the actor's full state dict."""
    return {name: tensor.detach().clone() for name, tensor in worker.full_state_dict().items()}


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """The full optimizer state as ``{"<param>.<slot>": tensor}`` copies."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    state = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))
    return {f"{name}.{slot}": value.clone() for name, slots in state["state"].items() for slot, value in slots.items()}


def update(worker: Any, batch: Batch) -> dict[str, float]:
    """One actor update on a copy of ``batch`` with fixed, varied advantages; returns its metrics."""
    data = batch.select(list(batch.keys()))
    data.union(worker.compute_log_prob(data).select(["old_log_probs"]))
    data["advantages"] = torch.linspace(-1.0, 1.0, data["old_log_probs"].numel()).reshape(data["old_log_probs"].shape)
    return worker.update_actor(data).meta["metrics"]


def train_and_generate(worker: Any, batch: Batch) -> tuple[dict[str, float], torch.Tensor]:
    """One sampled generation from the batch's prompts, one update and a weight sync, as a training step
    does; returns (update metrics, responses)."""
    prompt_mask = batch["attention_mask"][:, : batch["prompts"].shape[1]]
    prompts = Batch.from_dict({"input_ids": batch["prompts"], "attention_mask": prompt_mask})
    responses = worker.generate_sequences(prompts)["responses"]
    metrics = update(worker, batch)
    worker.sync_weights()
    return metrics, responses


ACTOR_SETTINGS = {
    "actor_rollout_ref__actor__optim__lr_warmup_steps": 3,
    "actor_rollout_ref__actor__optim__lr": 1e-3,
    "actor_rollout_ref__actor__shuffle": True,
    "actor_rollout_ref__actor__ppo_micro_batch_size_per_gpu": 2,
    "actor_rollout_ref__rollout__response_length": 6,
}


@pytest.mark.parametrize("policy_model_dir", [None, "qwen3_moe"], ids=["dense", "qwen3_moe"], indirect=True)
def test_actor_resumes_exactly_in_a_fresh_worker(make_worker: Callable[..., Any], batch: Batch, tmp_path: Path) -> None:
    """Save after two steps; a fresh worker that loads the checkpoint samples the same responses and makes
    the same update (metrics, parameters, optimizer moments, LR) as the worker that went on."""
    worker = make_worker("actor_rollout", **ACTOR_SETTINGS)
    for _ in range(2):
        train_and_generate(worker, batch)
    worker.save_checkpoint(tmp_path / "actor")
    for name in (
        "model/.metadata",
        "optim/.metadata",
        "extra_state_world_size_1_rank_0.pt",
        "checkpoint.json",
        "huggingface/config.json",
        "huggingface/model.safetensors",
        "huggingface/tokenizer_config.json",
    ):
        assert (tmp_path / "actor" / name).is_file(), name
    expected_metrics, expected_responses = train_and_generate(worker, batch)
    expected_params = full_state(worker)
    expected_optim = optimizer_state(worker.actor.module, worker.actor.optimizer)

    fresh = make_worker("actor_rollout", **ACTOR_SETTINGS)
    fresh.load_checkpoint(tmp_path / "actor")
    assert fresh.rollout_engine.weight_version == 3, "the engine reports the checkpoint's weight version"
    metrics, responses = train_and_generate(fresh, batch)
    assert torch.equal(responses, expected_responses)
    assert metrics == expected_metrics
    for name, tensor in full_state(fresh).items():
        assert torch.equal(tensor, expected_params[name]), name
    restored = optimizer_state(fresh.actor.module, fresh.actor.optimizer)
    assert restored.keys() == expected_optim.keys()
    for name, tensor in restored.items():
        assert torch.equal(tensor, expected_optim[name]), name


@pytest.mark.parametrize("policy_model_dir", [None, "qwen3_moe"], ids=["dense", "qwen3_moe"], indirect=True)
def test_hf_export_matches_the_trained_model(make_worker: Callable[..., Any], batch: Batch, tmp_path: Path) -> None:
    """``huggingface/`` loads with ``AutoModelForCausalLM`` and gives the trained actor's logits."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    worker = make_worker("actor_rollout", **ACTOR_SETTINGS)
    train_and_generate(worker, batch)
    worker.save_checkpoint(tmp_path)
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "huggingface").eval()
    inputs = {key: batch[key] for key in ("input_ids", "attention_mask", "position_ids")}
    with torch.no_grad():
        worker.actor.module.eval()
        trained = worker.actor.module(**inputs, use_cache=False).logits
        torch.testing.assert_close(exported(**inputs, use_cache=False).logits, trained, rtol=0, atol=1e-5)
    assert AutoTokenizer.from_pretrained(tmp_path / "huggingface").encode("3 + 4") == worker.tokenizer.encode("3 + 4")


def test_save_contents_are_respected(make_worker: Callable[..., Any], batch: Batch, tmp_path: Path) -> None:
    """Without ``hf_model`` only config and tokenizer are exported; loading a part that was not saved is an
    error naming ``load_contents``; an optimizer without state is neither materialised nor saved."""
    worker = make_worker("actor_rollout", actor_rollout_ref__actor__checkpoint__save_contents="[model, extra]")
    worker.save_checkpoint(tmp_path)
    assert not worker.actor.optimizer.state, "saving must not initialise the optimizer state"
    assert (tmp_path / "huggingface" / "config.json").is_file()
    assert not (tmp_path / "huggingface" / "model.safetensors").exists()
    assert not (tmp_path / "optim").exists()
    with pytest.raises(RLCoreError, match=r"has no optimizer but actor_rollout_ref\.actor\.checkpoint\.load_contents"):
        worker.load_checkpoint(tmp_path)
    with pytest.raises(RLCoreError, match="no checkpoint at"):
        worker.load_checkpoint(tmp_path / "missing")

    untrained = make_worker("actor")
    untrained.save_checkpoint(tmp_path / "untrained")
    assert json.loads((tmp_path / "untrained" / "checkpoint.json").read_text())["optimizer_state"] is False
    trained = make_worker("actor")
    update(trained, batch)
    assert trained.actor.optimizer.state
    trained.load_checkpoint(tmp_path / "untrained")
    assert not trained.actor.optimizer.state, "loading a stateless optimizer resets it"


def test_critic_checkpoint_round_trip(make_worker: Callable[..., Any], batch: Batch, tmp_path: Path) -> None:
    """A fresh critic that loads the checkpoint makes the same update as the critic that went on."""
    from rlcore.workers.base import CHECKPOINT_MANIFEST

    settings = {"critic__optim__lr": 1e-2, "critic__shuffle": True, "critic__ppo_micro_batch_size_per_gpu": 2}

    def update(worker: Any) -> dict[str, float]:
        """One critic update towards returns of 1."""
        batch["values"] = worker.compute_values(batch)["values"]
        batch["returns"] = torch.ones(batch["responses"].shape)
        return worker.update_critic(batch).meta["metrics"]

    worker = make_worker("critic", **settings)
    update(worker)
    worker.save_checkpoint(tmp_path / "critic")
    assert (tmp_path / "critic" / CHECKPOINT_MANIFEST).is_file()
    expected = update(worker)
    fresh = make_worker("critic", **settings)
    fresh.load_checkpoint(tmp_path / "critic")
    assert update(fresh) == expected
    assert fresh.critic.lr_scheduler.last_epoch == 2
    assert (
        optimizer_state(fresh.critic.module, fresh.critic.optimizer).keys()
        == optimizer_state(worker.critic.module, worker.critic.optimizer).keys()
    )


RANK_SCRIPT = textwrap.dedent("""
    import json, os, sys, torch
    from pathlib import Path
    from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
    from rlcore.workers.actor import ActorRolloutRefWorker
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    model_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    config = TrainingBackendContract.make_config(model_dir, **{"actor_rollout_ref.actor.strategy": "fsdp",
                                                               "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
                                                               "actor_rollout_ref.actor.optim.lr": 1e-3})
    worker = ActorRolloutRefWorker(config, "actor", rank, world)
    worker.init_model()
    batch = make_batch(worker.tokenizer)
    batch.union(worker.compute_log_prob(batch).select(["old_log_probs"]))
    batch["advantages"] = torch.ones(batch["responses"].shape)
    part = batch[rank * 2:(rank + 1) * 2]
    worker.update_actor(part)
    worker.save_checkpoint(out / "actor")
    state = get_model_state_dict(worker.actor.module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        torch.save(state, out / "expected.pt")
    worker.shutdown()
""")


def _free_port() -> int:
    """A free local TCP port for the rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_rank_checkpoint_loads_at_one_rank(
    make_worker: Callable[..., Any], tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Two gloo ranks save shards of one model; a single rank loads them (DCP reshards) and holds exactly the
    trained weights, and the per-rank extra state of both ranks is there."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": "2"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_SCRIPT, str(tiny_model_dir), str(tmp_path)],
            env={**env, "RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = [proc.communicate(timeout=300)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    directory = tmp_path / "actor"
    assert {p.name for p in (directory / "model").iterdir()} >= {".metadata", "__0_0.distcp", "__1_0.distcp"}
    for rank in range(2):
        assert (directory / f"extra_state_world_size_2_rank_{rank}.pt").is_file()
    assert json.loads((directory / "checkpoint.json").read_text())["world_size"] == 2

    worker = make_worker("actor", actor_rollout_ref__actor__optim__lr=1e-3)
    worker.load_checkpoint(directory)
    expected = torch.load(tmp_path / "expected.pt", weights_only=True)
    loaded = full_state(worker)
    assert loaded.keys() == expected.keys()
    for name, tensor in loaded.items():
        assert torch.equal(tensor, expected[name]), name
    assert {int(s["step"]) for s in worker.actor.optimizer.state.values()} == {1}


def test_hf_export_of_a_lora_actor_holds_the_merged_weights(
    make_worker: Callable[..., Any], batch: Batch, tmp_path: Path
) -> None:
    """With LoRA the export is a plain Hugging Face model (no adapter files) with the adapted actor's logits,
    and the sharded checkpoint restores the adapters."""
    from transformers import AutoModelForCausalLM

    lora = {
        "actor_rollout_ref__model__lora_rank": 4,
        "actor_rollout_ref__model__lora_alpha": 8,
        "actor_rollout_ref__actor__optim__lr": 1e-2,
    }
    worker = make_worker("actor", **lora)
    update(worker, batch)
    worker.save_checkpoint(tmp_path)
    assert not (tmp_path / "huggingface" / "adapter_config.json").exists()
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "huggingface").eval()
    inputs = {key: batch[key] for key in ("input_ids", "attention_mask", "position_ids")}
    with torch.no_grad():
        worker.actor.module.eval()
        trained = worker.actor.module(**inputs, use_cache=False).logits
        torch.testing.assert_close(exported(**inputs, use_cache=False).logits, trained, rtol=0, atol=1e-5)
    fresh = make_worker("actor", **lora)
    fresh.load_checkpoint(tmp_path)
    expected = full_state(worker)
    for name, tensor in full_state(fresh).items():
        assert torch.equal(tensor, expected[name]), name
