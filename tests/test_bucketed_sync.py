"""Bucketed weight sync (``rollout.checkpoint_engine.update_weights_bucket_megabytes``): buckets are bounded
and filled lazily, a tensor larger than a bucket travels alone, verl's other checkpoint-engine settings are
rejected by name, and a two-rank FSDP actor's sync into its HF rollout engine passes the parity check and
serves exactly the trainer's weights for every bucket size (the split-placement path over Ray is tested in
``test_ray_executor.py``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from rlcore_testkit.ranks import spawn

from rlcore.config.loader import load_config
from rlcore.config.schema import ConfigError, RolloutConfig
from rlcore.rollout.buckets import RunningChecksum, distinct_weights, tensor_nbytes, weight_buckets
from rlcore.rollout.weights import state_checksum

CE = "actor_rollout_ref.rollout.checkpoint_engine"
#: bucket sizes in MiB: none, smaller than the largest tensor (the embeddings), a few tensors, everything
BUCKET_SIZES: tuple[float | None, ...] = (None, 0.001, 0.02, 1000)


def named(*sizes: int) -> list[tuple[str, torch.Tensor]]:
    """float32 tensors of the given numbers of elements, named ``t0, t1, ...``."""
    return [(f"t{index}", torch.full((size,), float(index))) for index, size in enumerate(sizes)]


# ------------------------------------------------------------------ buckets
def test_buckets_hold_at_most_the_limit_and_keep_the_order() -> None:
    pairs = named(10, 10, 10, 5, 20)  # 40, 40, 40, 20, 80 bytes
    buckets = list(weight_buckets(pairs, 80))
    assert [[name for name, _ in bucket] for bucket in buckets] == [["t0", "t1"], ["t2", "t3"], ["t4"]]
    assert all(sum(tensor_nbytes(t) for _, t in bucket) <= 80 for bucket in buckets)


def test_a_tensor_larger_than_a_bucket_travels_alone() -> None:
    buckets = list(weight_buckets(named(2, 100, 2), 16))
    assert [[name for name, _ in bucket] for bucket in buckets] == [["t0"], ["t1"], ["t2"]]
    assert tensor_nbytes(buckets[1][0][1]) == 400  # never split


def test_no_limit_is_one_bucket_and_nothing_is_no_bucket() -> None:
    assert [len(bucket) for bucket in weight_buckets(named(3, 4, 5), None)] == [3]
    assert list(weight_buckets([], 8)) == []


def test_the_next_bucket_is_gathered_only_when_asked_for() -> None:
    pulled: list[str] = []

    def gathered() -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in named(4, 4, 4, 4):
            pulled.append(name)
            yield name, tensor

    buckets = weight_buckets(gathered(), 32)
    assert [name for name, _ in next(buckets)] == ["t0", "t1"]
    assert pulled == ["t0", "t1", "t2"]  # the first tensor of the next bucket, no more


def test_tied_aliases_are_left_out_once() -> None:
    embed = torch.randn(4, 3)
    state = {"embed.weight": embed, "norm.weight": torch.ones(3), "lm_head.weight": embed}
    assert [name for name, _ in distinct_weights(state)] == ["embed.weight", "norm.weight"]


def test_the_running_checksum_equals_the_state_checksum() -> None:
    state = {name: torch.randn(7, 5) for name in ("a", "b", "c")}
    running = RunningChecksum(torch.bfloat16, skip=("c",))
    for bucket in weight_buckets(state.items(), 150):
        running.add(bucket)
    expected = state_checksum(((n, t.to(torch.bfloat16)) for n, t in state.items()), skip=("c",))
    assert running.value == pytest.approx(expected, rel=1e-12)


# ------------------------------------------------------------------ config
def rollout_section(*overrides: str) -> RolloutConfig:
    """The typed rollout section of the defaults with ``overrides``."""
    return RolloutConfig.from_tree(load_config([], list(overrides), []))


def test_the_bucket_size_is_read_in_mebibytes() -> None:
    assert rollout_section().checkpoint_engine.bucket_bytes is None
    engine = rollout_section(f"{CE}.update_weights_bucket_megabytes=2048").checkpoint_engine
    assert engine.bucket_bytes == 2048 << 20


@pytest.mark.parametrize(
    ("override", "named_key"),
    [
        (f"{CE}.update_weights_bucket_megabytes=0", f"{CE}.update_weights_bucket_megabytes must be a positive"),
        (f"{CE}.update_weights_bucket_megabytes=lots", f"{CE}.update_weights_bucket_megabytes must be a positive"),
        (
            f"+{CE}.engine_kwargs.delta.max_changed_fraction=0.5",
            f"{CE}.engine_kwargs.delta: arguments for backend 'delta'",
        ),
        (f"+{CE}.engine_kwargs.naive.x=1", f"{CE}.engine_kwargs.naive: the naive transport takes no"),
        (f"{CE}.custom_backend_module=my.backend", f"{CE}.custom_backend_module: custom checkpoint-engine"),
    ],
)
def test_other_checkpoint_engine_settings_are_rejected_by_name(override: str, named_key: str) -> None:
    with pytest.raises(ConfigError, match=named_key.replace("(", r"\(").replace("[", r"\[")):
        rollout_section(override)


# ------------------------------------------------------------------ two FSDP ranks, colocated
def run_syncs(model_dir: Path, rank: int, world_size: int) -> list[dict[str, Any]]:
    """An ``actor_rollout`` worker on this rank: one update, then a sync for every bucket size of
    :data:`BUCKET_SIZES`; each sync's metrics and whether the engine then holds exactly the trainer's
    weights."""
    from test_shared_weights import FSDPSettings, train_once
    from transformers import AutoTokenizer

    from rlcore.config.schema import CheckpointEngineConfig
    from rlcore.workers.actor import ActorRolloutRefWorker

    config = FSDPSettings.make_config(model_dir, **{"actor_rollout_ref.rollout.response_length": 8})
    worker = ActorRolloutRefWorker(config, "actor_rollout", rank, world_size)
    worker.init_model()
    results = []
    try:
        train_once(worker, AutoTokenizer.from_pretrained(model_dir))
        trained = {name: tensor.clone() for name, tensor in worker.full_state_dict().items()}
        for megabytes in BUCKET_SIZES:
            section = CheckpointEngineConfig("naive", megabytes, {}, None)
            worker.bucket_bytes = section.bucket_bytes
            with torch.no_grad():  # scramble the engine's weights: the sync must bring every tensor back
                for param in worker.rollout_engine.module.parameters():
                    param.add_(1.0)
            metrics = worker.sync_weights()
            served = worker.rollout_engine.module.state_dict()
            exact = all(torch.equal(served[name], tensor.to(served[name].dtype)) for name, tensor in trained.items())
            results.append({"megabytes": megabytes, "metrics": metrics, "exact": exact})
    finally:
        worker.shutdown()
    return results


def run_rank(rank: int, world_size: int, store_file: str, model_dir: str, out_dir: str) -> None:
    """A spawned rank: join a gloo group through a ``FileStore``, run :func:`run_syncs`, save the result."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_file, world_size), rank=rank, world_size=world_size)
    try:
        result = run_syncs(Path(model_dir), rank, world_size)
    finally:
        dist.destroy_process_group()
    torch.save(result, Path(out_dir) / f"rank{rank}.pt")


def test_two_rank_bucketed_syncs_serve_the_trainers_weights(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # the spawned ranks import these modules by name
    jobs = importlib.import_module("test_bucketed_sync")
    try:
        spawn(jobs.run_rank, args=(2, str(tmp_path / "store"), str(tiny_model_dir), str(tmp_path)), nprocs=2)
    finally:
        for name in ("test_bucketed_sync", "test_shared_weights"):
            monkeypatch.delitem(sys.modules, name, raising=False)
    counts = []
    for rank in range(2):
        results = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        assert [r["megabytes"] for r in results] == list(BUCKET_SIZES)
        for result in results:
            assert result["exact"], f"rank {rank}, {result['megabytes']} MiB: the engine differs from the trainer"
            assert result["metrics"]["rollout/weight_checksum_diff"] <= 1e-6
        counts.append([r["metrics"].get("actor/weight_sync_buckets") for r in results])
    assert counts[0] == counts[1]
    unbounded, tiny, small, large = counts[0]
    assert unbounded is None  # no bound: the whole state dict at once, as before
    assert large == 1 and tiny is not None and small is not None and tiny > small > 1


# ------------------------------------------------------------------ LoRA, layered_summon
def test_layered_summon_merges_lora_weights_one_at_a_time(
    tiny_model_dir: Path, tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rollout.layered_summon`` on a LoRA actor (one rank: LoRA weights are never shared, so every sync
    copies): one tensor per bucket, each adapted weight merged from its own base weight and adapters, and the
    engine serves exactly the weights the whole-state merge gives."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    from test_shared_weights import FSDPSettings, train_once

    worker = FSDPSettings.make_actor(
        tiny_model_dir,
        role="actor_rollout",
        **{
            "actor_rollout_ref.model.lora_rank": 4,
            "actor_rollout_ref.model.lora_alpha": 8,
            "actor_rollout_ref.actor.optim.lr": 1e-2,
            "actor_rollout_ref.rollout.layered_summon": True,
            "actor_rollout_ref.rollout.response_length": 8,
        },
    )
    try:
        assert worker.bucket_bytes == 1
        train_once(worker, tiny_tokenizer)  # the adapters move: merged weights differ from the base model's
        metrics = worker.sync_weights()
        merged = worker.actor.full_weights()
        streamed = dict(worker.actor.iter_full_weights())
        assert metrics["rollout/weight_checksum_diff"] <= 1e-6
        assert metrics["actor/weight_sync_buckets"] == len(streamed)
        assert set(streamed) <= set(merged) and not any(".lora_" in name for name in streamed)
        served = worker.rollout_engine.module.state_dict()
        for name, tensor in merged.items():
            torch.testing.assert_close(served[name], tensor.to(served[name].dtype), rtol=0, atol=0, msg=name)
            if name in streamed:
                torch.testing.assert_close(streamed[name], tensor, rtol=0, atol=0, msg=name)
    finally:
        FSDPSettings.close(worker)
