"""Partial rollout through the actor worker (``ActorRolloutRefWorker.generate_partial``): a PPO update and a
weight sync land between two chunks, and every token's recorded log-prob equals the actor's own
teacher-forced log-prob (``compute_log_prob``, temperature-scaled) at the version that sampled it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
from rlcore_testkit.contracts.rollout import make_prompt_batch

from rlcore.api import Batch, RLCoreError, SupportsPartialRollout


class FSDPSettings(TrainingBackendContract):
    """The backend contract's small run settings for the ``fsdp`` engine (not collected)."""

    component_name = "fsdp"


@pytest.fixture
def worker(tiny_model_dir: Path) -> Iterator[Any]:
    """An actor + rollout worker on one CPU rank (temperature 0.7, 12 tokens, EOS ignored), initialised."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    actor = FSDPSettings.make_actor(
        tiny_model_dir,
        role="actor_rollout",
        **{
            "actor_rollout_ref.rollout.response_length": 12,
            "actor_rollout_ref.rollout.temperature": 0.7,
            "actor_rollout_ref.rollout.ignore_eos": True,
            "actor_rollout_ref.rollout.calculate_log_probs": True,
        },
    )
    yield actor
    FSDPSettings.close(actor)
    torch.set_num_threads(threads)


def test_a_weight_update_between_chunks(worker: Any, tiny_tokenizer: Any) -> None:
    """Chunk 1 under version v, an update + sync, chunk 2 under v + 1: the trajectories span two versions
    and each token's log-prob is the actor's at its version (1e-5, fp32)."""
    version = worker.rollout_engine.weight_version
    first = worker.generate_partial(make_prompt_batch(tiny_tokenizer, meta={"max_new_tokens": 5}))
    before = worker.compute_log_prob(first)["old_log_probs"][:, :5]
    batch: Batch = make_batch(tiny_tokenizer)
    batch.union(worker.compute_log_prob(batch).select(["old_log_probs"]))
    batch["advantages"] = torch.ones_like(batch["old_log_probs"])
    worker.update_actor(batch)
    worker.sync_weights()
    assert worker.rollout_engine.weight_version == version + 1
    first.meta["max_new_tokens"] = 100
    second = worker.generate_partial(first)
    assert bool(second["finished"].all())
    expected = torch.tensor([version] * 5 + [version + 1] * 7).expand(len(second), -1)
    assert torch.equal(second["rollout_versions"], expected)
    after = worker.compute_log_prob(second)["old_log_probs"]
    recorded = second["rollout_log_probs"]
    torch.testing.assert_close(recorded[:, :5], before, atol=1e-5, rtol=0)
    torch.testing.assert_close(recorded[:, 5:], after[:, 5:], atol=1e-5, rtol=0)
    assert not torch.allclose(after[:, :5], before, atol=1e-4), "the update did not change the policy"


class NoPartialEngine:
    """A plugin engine without the ability: the HF engine's protocol calls only (``generate_partial`` hidden)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    @property
    def weight_version(self) -> int:
        """The wrapped engine's."""
        return int(self._engine.weight_version)

    def generate(self, batch: Batch, validate: bool = False) -> Batch:
        """The wrapped engine's."""
        return self._engine.generate(batch, validate)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """The wrapped engine's."""
        self._engine.update_weights(named_tensors)

    def prompt_log_probs(self, token_ids: Sequence[int]) -> torch.Tensor:
        """The wrapped engine's."""
        return self._engine.prompt_log_probs(token_ids)

    def sleep(self) -> None:
        """The wrapped engine's."""
        self._engine.sleep()

    def wake(self) -> None:
        """The wrapped engine's."""
        self._engine.wake()


def test_errors_name_the_engine_and_the_budget(worker: Any, tiny_tokenizer: Any) -> None:
    """An engine without the ability and a missing budget are one-line errors naming what is wrong."""
    with pytest.raises(RLCoreError, match=r'meta\["max_new_tokens"\] must be a positive integer'):
        worker.generate_partial(make_prompt_batch(tiny_tokenizer))
    worker.rollout_engine = NoPartialEngine(worker.rollout_engine)
    assert not isinstance(worker.rollout_engine, SupportsPartialRollout)
    with pytest.raises(RLCoreError, match="rollout.name=hf: the rollout engine NoPartialEngine has no partial rollout"):
        worker.generate_partial(make_prompt_batch(tiny_tokenizer, meta={"max_new_tokens": 2}))
