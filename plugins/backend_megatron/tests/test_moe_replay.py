"""Routing replay on the Megatron engine (``actor_rollout_ref.actor.router_replay.mode``): R2 records each
token's experts in the log-prob pass, a batch's ``routed_experts`` are replayed by megatron-core's routers
(``-1`` recomputed), and ``router_replay_agreement`` measures how many recomputed top-k sets equal the replayed
ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf, open_dict
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch

from rlcore.api.training import ROUTED_EXPERTS
from rlcore.errors import RLCoreError

MODE = "actor_rollout_ref.actor.router_replay.mode"


class Settings(TrainingBackendContract):
    """The contract's small config (not collected: no ``Test`` prefix)."""

    component_name = "megatron"


def config_with(model_dir: Path, mode: str, **overrides: Any) -> Any:
    """The contract's config with ``router_replay.mode=mode`` (the key is not in this branch's defaults yet)."""
    config = Settings.make_config(model_dir, **{"actor_rollout_ref.actor.optim.lr": 1e-3, **overrides})
    with open_dict(config):
        OmegaConf.update(config, MODE, mode, force_add=True)
    return config


def make_worker(model_dir: Path, mode: str) -> Any:
    """An initialised Megatron actor worker with ``router_replay.mode=mode``."""
    from rlcore.workers.actor import ActorRolloutRefWorker

    worker = ActorRolloutRefWorker(config_with(model_dir, mode), "actor", 0, 1)
    worker.init_model()
    return worker


def forward(worker: Any, batch: Any) -> Any:
    """The engine's output for ``batch`` as one micro-batch."""
    return worker.actor.forward([batch], temperature=1.0, with_entropy=False)[0]


@pytest.fixture(scope="module")
def worker(moe_model_dir: Path) -> Any:
    """An R2 worker (records in its log-prob pass, replays what a batch carries)."""
    worker = make_worker(moe_model_dir, "R2")
    yield worker
    worker.shutdown()


def test_record_then_replay_unchanged_model(worker: Any, moe_model_dir: Path) -> None:
    """R2 records ``[B, P + R, L, k]`` experts (``-1`` outside the attention mask); replaying them on the
    unchanged model agrees on every token (1.0) and changes no log-prob; an update that replays them logs
    ``actor/router_replay_agreement`` 1.0 with the MoE metrics."""
    from transformers import AutoTokenizer

    batch = make_batch(AutoTokenizer.from_pretrained(moe_model_dir))
    recorded = forward(worker, batch)
    routed = recorded.routed_experts
    mask = batch["attention_mask"].bool()
    assert routed.shape == (*batch["input_ids"].shape, 2, 2)
    assert bool((routed[~mask] == -1).all()) and bool(((routed[mask] >= 0) & (routed[mask] < 8)).all())
    assert {"moe_aux_loss", "moe_load_max_over_mean"} <= recorded.stats.keys()
    assert "router_replay_agreement" not in recorded.stats
    batch[ROUTED_EXPERTS] = routed
    replayed = forward(worker, batch)
    assert replayed.stats["router_replay_agreement"] == 1.0
    torch.testing.assert_close(replayed.log_probs, recorded.log_probs, atol=0, rtol=0)
    assert torch.equal(replayed.routed_experts, routed)
    batch["old_log_probs"] = recorded.log_probs
    batch["advantages"] = torch.linspace(-1, 1, batch["responses"].numel()).view_as(batch["responses"])
    metrics = worker.update_actor(batch).meta["metrics"]
    assert metrics["actor/router_replay_agreement"] == 1.0
    assert {"actor/moe_aux_loss", "actor/moe_load_max_over_mean"} <= metrics.keys()


def test_replay_overrides_a_perturbed_router(moe_model_dir: Path) -> None:
    """With the routers' weights perturbed, recomputing moves the routing and the log-probs; replaying the
    unperturbed model's routing uses exactly those experts (agreement < 1), and its log-probs stay much closer
    to the unperturbed model's (only the routing weights of the replayed experts differ). Tokens whose entry is
    ``-1`` are recomputed."""
    from transformers import AutoTokenizer

    worker = make_worker(moe_model_dir, "R3")
    try:
        batch = make_batch(AutoTokenizer.from_pretrained(moe_model_dir))
        record = make_worker(moe_model_dir, "R2")
        try:
            original = forward(record, batch)
        finally:
            record.shutdown()
        mask = batch["response_mask"].bool()
        torch.manual_seed(0)
        with torch.no_grad():
            for name, param in worker.actor.module.named_parameters():
                if name.endswith("mlp.router.weight"):
                    param.add_(torch.randn_like(param) * param.std())
        free = forward(worker, batch)
        assert free.routed_experts is None  # R3 does not record
        moved = (free.log_probs - original.log_probs)[mask].abs().max()
        assert moved > 1e-2
        batch[ROUTED_EXPERTS] = original.routed_experts
        replayed = forward(worker, batch)
        assert replayed.stats["router_replay_agreement"] < 1.0
        kept = (replayed.log_probs - original.log_probs)[mask].abs().max()
        assert kept < moved / 5, (kept, moved)
        taps = worker.actor.taps
        first = taps[0].calls[-1]
        assert bool((first.used == first.recomputed).all(-1).logical_not().any())  # the replay did override
        partial = original.routed_experts.clone()
        partial[:, ::2] = -1  # every other column recomputed
        batch[ROUTED_EXPERTS] = partial
        forward(worker, batch)
        call = taps[0].calls[-1]
        assert not bool(call.replayed.all()) and bool(call.replayed.any())
        assert torch.equal(call.used[~call.replayed], call.recomputed[~call.replayed])
    finally:
        worker.shutdown()


def test_replay_settings_are_checked(moe_model_dir: Path) -> None:
    """An unknown mode, recording (R2) over pipeline stages and a ``routed_experts`` of the wrong shape are errors
    naming the key."""
    from rlcore_plugin_megatron.engine import check_config
    from transformers import AutoTokenizer

    with pytest.raises(RLCoreError, match=r"router_replay.mode='R4': choose one of disabled, R2, R3"):
        make_worker(moe_model_dir, "R4")
    config = config_with(moe_model_dir, "R2", **{"actor_rollout_ref.actor.megatron.pipeline_model_parallel_size": 2})
    with pytest.raises(RLCoreError, match=r"router_replay.mode=R2 with .*pipeline_model_parallel_size=2: recording"):
        check_config(config, "actor", "actor_rollout_ref.actor", "actor_rollout_ref.model")
    worker = make_worker(moe_model_dir, "R3")
    try:
        batch = make_batch(AutoTokenizer.from_pretrained(moe_model_dir))
        batch[ROUTED_EXPERTS] = torch.zeros(*batch["input_ids"].shape, 2, 3, dtype=torch.long)
        with pytest.raises(RLCoreError, match=r"'routed_experts' has shape .*this model needs"):
            forward(worker, batch)
    finally:
        worker.shutdown()


def test_replay_over_pipeline_stages_with_recomputation(jobs: Any, moe_model_dir: Path, tmp_path: Path) -> None:
    """R3 with two pipeline stages (verl's router-replay script sets pipeline parallelism and full
    recomputation): each stage replays its own layers' part of the batch's routes, and the recomputed forward
    in the backward pass routes as the forward did. The log-probs before (1e-5) and after (1e-4) one update and
    the gradient norm (1e-4 relative) equal one rank's with the same replay, which differ from the routers' own
    choice."""
    reference = jobs.run_layout("moe_r3_pp1", moe_model_dir, 0)
    mask = jobs.global_batch(moe_model_dir)["response_mask"].bool()
    assert (reference["before"] - reference["free"])[mask].abs().max() > 1e-2  # the replay changed the routing
    results = jobs.spawn_world(2, {"moe_r3_pp2": ("layout", "moe_r3_pp2", moe_model_dir)}, tmp_path)["moe_r3_pp2"]
    for rank, result in enumerate(results):
        assert result["recompute"] == "full"
        torch.testing.assert_close(result["before"], reference["before"], atol=1e-5, rtol=0, msg=f"rank {rank}")
        torch.testing.assert_close(result["after"], reference["after"], atol=1e-4, rtol=0, msg=f"rank {rank}")
        assert result["grad_norm"] == pytest.approx(reference["grad_norm"], rel=1e-4)


@pytest.mark.parametrize("lora", [False, True])
def test_sequence_parallelism_on_moe_or_lora_is_an_error(moe_model_dir: Path, tiny_model_dir: Path, lora: bool) -> None:
    """``megatron.sequence_parallel`` with tensor parallelism on a mixture-of-experts model (whose routing record
    holds whole sequences) or with LoRA is an error naming the key, before any model is built; a dense model
    without LoRA passes the check."""
    from rlcore_plugin_megatron.engine import check_config

    split = {
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": 2,
        "actor_rollout_ref.actor.megatron.sequence_parallel": True,
    }
    lora_keys = {"actor_rollout_ref.model.lora.rank": 4, "actor_rollout_ref.model.lora.alpha": 8} if lora else {}
    model = tiny_model_dir if lora else moe_model_dir
    config = Settings.make_config(model, **split, **lora_keys)
    what = "LoRA adapters" if lora else "mixture-of-experts model"
    with pytest.raises(RLCoreError, match=rf"megatron\.sequence_parallel=true with .*: .*{what}"):
        check_config(config, "actor", "actor_rollout_ref.actor", "actor_rollout_ref.model")
    assert check_config(
        Settings.make_config(tiny_model_dir, **split), "actor", "actor_rollout_ref.actor", "actor_rollout_ref.model"
    ).sequence_parallel
