"""Weight transports (kind ``weight_transport``, ``checkpoint_engine.backend``): a plugin's transport is used,
``delta`` leaves the engine exactly where a full sync does after real optimizer steps (a split float32 rollout
worker, and a real colocated run with a bfloat16 rollout whose metrics equal the ``naive`` run's), and falls back
to a full sync on its first send, on a corrupted engine and on a bucket whose bytes do not match its digest."""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
from rlcore_testkit.runs import make_tiny_task, tiny_run

import rlcore
from rlcore.api.transport import BucketChecksumError, WeightBucket
from rlcore.config.problems import ConfigError
from rlcore.controller.groups import GroupReceiver
from rlcore.controller.groups import sync_weights as group_sync
from rlcore.errors import RLCoreError
from rlcore.rollout.transport import DeltaTransport, NaiveTransport, bucket_digest, resolve_bucket

CE = "actor_rollout_ref.rollout.checkpoint_engine"


class FSDPSettings(TrainingBackendContract):
    """The backend contract's small run settings for the ``fsdp`` engine (not collected)."""

    component_name = "fsdp"


def train_once(worker: Any, tokenizer: Any) -> None:
    """One real PPO update of the actor (an optimizer step) on random responses."""
    batch = make_batch(tokenizer)
    batch.union(worker.compute_log_prob(batch).select(["old_log_probs"]))
    batch["advantages"] = torch.ones_like(batch["old_log_probs"])
    worker.update_actor(batch)


SMALL = {"actor_rollout_ref.rollout.response_length": 8}


@pytest.fixture
def pair(tiny_model_dir: Path) -> Iterator[tuple[Any, Any]]:
    """A split placement in one process: an ``actor`` trainer worker and a ``rollout`` worker."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    trainer = FSDPSettings.make_actor(tiny_model_dir, role="actor", **SMALL)
    rollout = FSDPSettings.make_actor(tiny_model_dir, role="rollout", **SMALL)
    yield trainer, rollout
    FSDPSettings.close(rollout)
    FSDPSettings.close(trainer)
    torch.set_num_threads(threads)


def sync_weights(trainer: Any, rollout: Any, transport: Any, bucket_bytes: int | None) -> dict[str, float]:
    """The split placement's sync, with the rollout worker's receiver kept across syncs as the groups keep it."""
    receivers = rollout.__dict__.setdefault("_test_receivers", {})
    receiver = receivers.setdefault(id(transport), GroupReceiver(rollout, keep=transport.incremental))
    return group_sync(trainer, rollout, transport, bucket_bytes, receiver)


def served(worker: Any) -> dict[str, torch.Tensor]:
    """The rollout engine's weights."""
    return {name: tensor.clone() for name, tensor in worker.rollout_engine.module.state_dict().items()}


def assert_serves(rollout: Any, trainer: Any) -> None:
    """The engine holds exactly the trainer's weights."""
    engine = served(rollout)
    for name, tensor in trainer.full_state_dict().items():
        assert torch.equal(engine[name], tensor), name


def test_delta_sends_only_what_changed_and_serves_what_a_full_sync_serves(
    pair: tuple[Any, Any], tiny_tokenizer: Any
) -> None:
    trainer, rollout = pair
    delta = DeltaTransport(trainer.transport_config)
    first = sync_weights(trainer, rollout, delta, None)  # first send: full
    assert first["actor/weight_sync_delta_fraction"] == 1.0
    assert first["actor/weight_sync_bytes"] == first["actor/weight_sync_bytes_full"] > 0
    assert first["rollout/weight_checksum_diff"] <= 1e-6
    nothing = sync_weights(trainer, rollout, delta, None)
    assert nothing["actor/weight_sync_bytes"] == 0.0 and nothing["actor/weight_sync_buckets"] == 0.0
    assert nothing["rollout/weight_version"] == first["rollout/weight_version"] + 1
    for _ in range(2):  # real optimizer steps: on this dense model every tensor changes
        train_once(trainer, tiny_tokenizer)
        step = sync_weights(trainer, rollout, delta, None)
        assert step["rollout/weight_checksum_diff"] <= 1e-6
        assert_serves(rollout, trainer)
    assert step["actor/weight_sync_delta_fraction"] == 1.0
    by_delta = served(rollout)
    probe = rollout.rollout_engine.prompt_log_probs(list(range(3, 20)))
    sync_weights(trainer, rollout, NaiveTransport(trainer.transport_config), None)
    assert all(torch.equal(by_delta[name], tensor) for name, tensor in served(rollout).items())
    assert torch.equal(probe, rollout.rollout_engine.prompt_log_probs(list(range(3, 20))))

    delta.reset()  # a sparse update (one tensor, as with frozen layers) after a full send
    sync_weights(trainer, rollout, delta, 1 << 20)
    with torch.no_grad():
        param = next(
            p for name, p in trainer.actor.module.named_parameters() if name.endswith("input_layernorm.weight")
        )
        param.add_(0.5)
    whole = sync_weights(trainer, rollout, delta, 1 << 20)
    assert whole["actor/weight_sync_bytes"] == param.numel() * param.element_size()
    assert 0 < whole["actor/weight_sync_delta_fraction"] < 0.5 and whole["actor/weight_sync_buckets"] == 1.0
    assert_serves(rollout, trainer)
    with torch.no_grad():  # three elements of one matrix: indices and values reach the rollout worker
        matrix = next(p for name, p in trainer.actor.module.named_parameters() if name.endswith("up_proj.weight"))
        matrix.view(-1)[[0, 7, matrix.numel() - 1]] += 0.25
    sparse = sync_weights(trainer, rollout, delta, 1 << 20)
    last_gap = matrix.numel() - 9  # from index 7 to the last, less one: a varint of 7 bits a byte
    assert sparse["actor/weight_sync_bytes"] == 1 + 1 + -(-last_gap.bit_length() // 7) + 3 * 4
    assert sparse["rollout/weight_checksum_diff"] <= 1e-6
    assert_serves(rollout, trainer)


def test_a_corrupted_engine_gets_a_full_resend(pair: tuple[Any, Any]) -> None:
    trainer, rollout = pair
    delta = DeltaTransport(trainer.transport_config)
    sync_weights(trainer, rollout, delta, None)
    with torch.no_grad():  # the engine no longer holds what the transport last sent
        next(rollout.rollout_engine.module.parameters()).add_(1.0)
    metrics = sync_weights(trainer, rollout, delta, None)  # the check fails on the partial send, then full
    assert metrics["actor/weight_sync_delta_fraction"] == 1.0
    assert_serves(rollout, trainer)


def test_a_bucket_with_wrong_bytes_is_refused(pair: tuple[Any, Any]) -> None:
    _, rollout = pair
    tensors = [("a", torch.arange(4.0)), ("b", torch.ones(2, 2))]
    digest = bucket_digest(tensors)
    resolve_bucket(WeightBucket(tensors, digest), {})
    tensors[1][1][0, 0] = 2.0
    with pytest.raises(BucketChecksumError, match=r"2 tensor\(s\) \(a, b\).*do not match"):
        rollout.receive_weight_bucket(dict(tensors), digest)


def test_hook_register_weight_transports(registered: Any, tiny_model_dir: Path, tiny_tokenizer: Any) -> None:
    """A transport a plugin registers is the one the colocated sync goes through."""
    sends: list[Any] = []

    class Recording(NaiveTransport):
        """The naive transport, recording its reports."""

        def send(self, weights: Any, receiver: Any, bucket_bytes: int | None) -> Any:
            report = super().send(weights, receiver, bucket_bytes)
            sends.append(report)
            return report

    plugin = types.SimpleNamespace(
        register_weight_transports=rlcore.hookimpl(lambda register: register("rec", Recording))
    )
    with registered(plugin):
        worker = FSDPSettings.make_actor(tiny_model_dir, role="actor_rollout", **SMALL, **{f"{CE}.backend": "rec"})
    try:
        assert isinstance(worker.transport, Recording)
        train_once(worker, tiny_tokenizer)
        metrics = worker._send_weights(worker.actor, worker.rollout_engine)  # the sync past the shared-tensor path
        assert len(sends) == 1 and sends[0].full and sends[0].bytes_sent == sends[0].bytes_full > 0
        assert metrics["rollout/weight_checksum_diff"] <= 1e-6
    finally:
        FSDPSettings.close(worker)


def test_colocated_delta_reports_its_bytes(tiny_model_dir: Path, tiny_tokenizer: Any, tmp_path: Path) -> None:
    worker = FSDPSettings.make_actor(tiny_model_dir, role="actor_rollout", **SMALL, **{f"{CE}.backend": "delta"})
    try:
        first = worker._send_weights(worker.actor, worker.rollout_engine)
        again = worker._send_weights(worker.actor, worker.rollout_engine)
        assert first["actor/weight_sync_delta_fraction"] == 1.0 and again["actor/weight_sync_bytes"] == 0.0
        train_once(worker, tiny_tokenizer)
        step = worker._send_weights(worker.actor, worker.rollout_engine)
        assert step["rollout/weight_checksum_diff"] <= 1e-6
        assert step["actor/weight_sync_bytes_full"] == first["actor/weight_sync_bytes_full"]
        worker.save_checkpoint(tmp_path / "actor")
        worker.load_checkpoint(tmp_path / "actor")  # a resume: the next send is a full one
        resumed = worker._send_weights(worker.actor, worker.rollout_engine)
        assert resumed["actor/weight_sync_delta_fraction"] == 1.0
    finally:
        FSDPSettings.close(worker)


def test_an_unknown_backend_names_the_key_and_the_transports(tiny_model_dir: Path) -> None:
    with pytest.raises(RLCoreError, match=rf"{CE}\.backend: unknown weight_transport 'nccl'.*delta, naive"):
        FSDPSettings.make_actor(tiny_model_dir, role="actor_rollout", **SMALL, **{f"{CE}.backend": "nccl"})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"backend": "delta", "engine_kwargs": {"delta": {"max_changed_fraction": 2}}}, "must be a number in"),
        ({"backend": "delta", "engine_kwargs": {"delta": {"sparse": True}}}, r"delta\.sparse: unknown delta"),
    ],
    ids=["fraction", "unknown"],
)
def test_bad_delta_arguments_are_named(overrides: dict[str, Any], message: str) -> None:
    from rlcore.config.sections.rollout import CheckpointEngineConfig

    with pytest.raises(ConfigError, match=message):
        CheckpointEngineConfig.from_tree(_tree(overrides))


def _tree(overrides: dict[str, Any]) -> Any:
    """A config tree holding just the checkpoint-engine section."""
    from omegaconf import OmegaConf

    section = {"backend": "naive", "update_weights_bucket_megabytes": None, "custom_backend_module": None}
    section.update(overrides)
    return OmegaConf.create({"actor_rollout_ref": {"rollout": {"checkpoint_engine": section}}})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            [f"{CE}.backend=nccl"],
            rf"{CE}\.backend=nccl: unknown weight_transport 'nccl'\. Known weight_transports: delta, naive",
        ),
        (
            [f"{CE}.backend=delta", "async_training.enable=true"],
            rf"{CE}\.backend='delta' with async_training\.enable=true",
        ),
    ],
    ids=["unknown", "async"],
)
def test_a_run_names_a_transport_it_cannot_use(overrides: list[str], message: str) -> None:
    from rlcore.config import load_config
    from rlcore.plugins import load_plugins
    from rlcore.run import check_components

    with pytest.raises(ConfigError, match=message):
        check_components(load_config(overrides=overrides), load_plugins())


#: metrics that measure time, memory or the transport itself: they differ between two equal runs
_RUN_DEPENDENT = ("timing", "perf/", "_s", "memory", "weight_sync_", "throughput", "mfu")


def _step_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Every step's metrics of a run, without those that depend on timing or on the transport."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [
        {key: value for key, value in row.items() if not any(part in key for part in _RUN_DEPENDENT)} for row in rows
    ]


def test_a_real_run_with_delta_equals_the_naive_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A colocated CPU run with a bfloat16 rollout (``cpu_autocast``: the engine holds bf16 copies, so the weights
    go through the transport): the same metrics every step as with ``naive``, the engine checked exact after every
    sync, and ``delta`` sending less than a full sync of the bf16 weights after the first step."""
    task = make_tiny_task(tmp_path / "task")
    extra = ("actor_rollout_ref.actor.fsdp_config.cpu_autocast=true", "actor_rollout_ref.actor.optim.lr=1e-5")
    runs = {}
    for backend in ("naive", "delta"):
        _, run_dir = tiny_run(tmp_path / backend, tiny_model_dir, task, *extra, f"{CE}.backend={backend}")
        runs[backend] = run_dir
    rows = [json.loads(line) for line in (runs["delta"] / "metrics.jsonl").read_text().splitlines()][
        1:
    ]  # 0: validation
    assert len(rows) == 2 and all(row["rollout/weight_checksum_diff"] <= 1e-6 for row in rows)
    assert all(0 < row["actor/weight_sync_delta_fraction"] < 1 for row in rows), rows
    assert _step_metrics(runs["delta"]) == _step_metrics(runs["naive"])
