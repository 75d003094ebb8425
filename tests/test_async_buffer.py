"""The sample buffer of asynchronous training (:mod:`rlcore.controller.sample_buffer`) on real Batches: groups
sampled oldest first, verl's staleness bound with drop (evict and refill one for one) and wait, filtered groups
refilled, the staleness metrics, and its state through a pickle round trip."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import numpy as np
import pytest
import torch

from rlcore.api.batch import Batch
from rlcore.controller.sample_buffer import PREFIX, SampleBuffer
from rlcore.errors import RLCoreError

N = 2  # responses per prompt
LENGTH = 4


class Loader:
    """Prompt batches of ``size`` rows with uids p0, p1, ... in order."""

    def __init__(self, size: int) -> None:
        self.size, self.next = size, 0

    def __call__(self) -> Batch:
        uids = [f"p{self.next + i}" for i in range(self.size)]
        self.next += self.size
        return Batch.from_dict({"uid": np.array(uids, dtype=object)})


def generated(prompts: Batch, versions: list[list[int]] | None = None) -> Batch:
    """``N`` responses per prompt (the last token padding), optionally with per-token versions."""
    rows = prompts.repeat(N, interleave=True)
    mask = torch.ones(len(rows), LENGTH, dtype=torch.long)
    mask[:, -1] = 0
    rows["response_mask"] = mask
    if versions is not None:
        rows["rollout_versions"] = torch.tensor(versions, dtype=torch.long)
    return rows


class Driver:
    """Issues prompts into ``buffer`` and finishes them when asked, in order (what the pipeline does)."""

    def __init__(self, buffer: SampleBuffer, loader: Loader, keep: Callable[[Batch], Batch] = lambda b: b) -> None:
        self.buffer, self.loader, self.keep = buffer, loader, keep
        self.version = 0
        self.pending: list[Batch] = []
        self.issued: list[int] = []

    def issue(self, k: int) -> None:
        prompts = self.buffer.take_prompts(k, self.loader)
        self.buffer.issue(k, self.version)
        self.pending.append(prompts)
        self.issued.append(k)

    def advance(self) -> bool:
        if not self.pending:
            return False
        rows = self.keep(generated(self.pending.pop(0)))
        refill = self.buffer.finish(rows, epoch=0)
        if refill:
            self.issue(refill)
        return True

    def sample(self, k: int) -> tuple[Batch, dict[str, float]]:
        return self.buffer.sample(self.version, k, self.issue, self.advance)


def uids(batch: Batch) -> list[str]:
    return list(dict.fromkeys(batch["uid"]))


def test_groups_come_oldest_first_and_leftover_prompts_wait() -> None:
    driver = Driver(SampleBuffer(None, "drop"), Loader(3))
    driver.issue(2)
    driver.issue(2)
    batch, metrics = driver.sample(3)
    assert uids(batch) == ["p0", "p1", "p2"] and len(batch) == 3 * N
    assert driver.buffer.prompts is not None and list(driver.buffer.prompts["uid"]) == ["p4", "p5"]
    assert metrics[f"{PREFIX}/trajectory_spans/max"] == 1.0
    assert metrics[f"{PREFIX}/trajectory_staleness/mean"] == 0.0


def test_drop_evicts_groups_beyond_the_bound_and_refills_one_for_one() -> None:
    driver = Driver(SampleBuffer(2, "drop"), Loader(2))
    driver.issue(2)  # at version 0
    driver.advance()
    driver.version = 2  # two updates later: these groups span 3 versions > 2
    batch, metrics = driver.sample(2)
    assert uids(batch) == ["p2", "p3"], "the refills, issued at version 2"
    assert driver.issued == [2, 2]
    assert metrics[f"{PREFIX}/evicted_samples"] == 2.0
    assert metrics[f"{PREFIX}/evicted_samples_staleness/max"] == 3.0
    assert metrics[f"{PREFIX}/trajectory_staleness_worst/max"] == 0.0


def test_within_the_bound_nothing_is_dropped() -> None:
    driver = Driver(SampleBuffer(2, "drop"), Loader(2))
    driver.issue(2)
    driver.version = 1  # spans 2 versions: within the bound
    batch, metrics = driver.sample(2)
    assert uids(batch) == ["p0", "p1"] and f"{PREFIX}/evicted_samples" not in metrics
    assert metrics[f"{PREFIX}/trajectory_staleness_worst/max"] == 1.0


def test_wait_keeps_stale_groups_and_waits_for_in_flight_ones_at_the_bound() -> None:
    driver = Driver(SampleBuffer(2, "wait"), Loader(2))
    driver.issue(2)
    driver.advance()
    driver.issue(2)  # still in flight, issued at version 0
    driver.version = 3
    batch, metrics = driver.sample(2)
    assert uids(batch) == ["p0", "p1"], "wait never evicts for age"
    assert f"{PREFIX}/evicted_samples" not in metrics
    assert driver.pending == [], "the in-flight generation at the bound was finished before sampling"
    assert [g.uid for g in driver.buffer.finished] == ["p2", "p3"]


def test_filtered_groups_are_refilled_one_for_one_and_the_batch_size_holds() -> None:
    def drop_even(rows: Batch) -> Batch:
        keep = np.array([int(uid[1:]) % 2 == 1 for uid in rows["uid"]])
        return rows[keep]

    driver = Driver(SampleBuffer(None, "drop"), Loader(4), keep=drop_even)
    driver.issue(4)
    batch, _ = driver.sample(4)
    assert uids(batch) == ["p1", "p3", "p5", "p7"] and len(batch) == 4 * N
    assert driver.issued == [4, 2, 1, 1], "each round refills exactly the groups the filter removed"


def test_a_starved_buffer_says_so() -> None:
    driver = Driver(SampleBuffer(None, "drop"), Loader(2))
    with pytest.raises(RLCoreError, match="holds 0 of the 2 groups"):
        driver.sample(2)


def test_token_versions_give_spans_staleness_and_crossing() -> None:
    buffer = SampleBuffer(None, "drop")
    buffer.take_prompts(1, Loader(1))
    buffer.issue(1, 0)
    buffer.finish(generated(Loader(1)(), versions=[[0, 0, 1, 0], [1, 1, 1, 0]]), epoch=0)
    _, metrics = buffer.sample(2, 1, lambda k: None, lambda: False)
    assert metrics[f"{PREFIX}/trajectory_spans/max"] == 2.0 and metrics[f"{PREFIX}/trajectory_spans/min"] == 1.0
    assert metrics[f"{PREFIX}/trajectory_staleness/mean"] == 1.0  # newest version 1 in both, trained at 2
    assert metrics[f"{PREFIX}/trajectory_staleness_worst/max"] == 2.0
    assert metrics[f"{PREFIX}/crossed_version_fraction"] == 0.5
    assert metrics[f"{PREFIX}/token_staleness"] == pytest.approx((2 + 2 + 1 + 1 + 1 + 1) / 6)


def test_state_round_trips_through_a_pickle() -> None:
    loader = Loader(3)
    first = Driver(SampleBuffer(4, "drop"), loader)
    first.issue(2)
    first.advance()
    first.issue(1)
    state = pickle.loads(pickle.dumps(first.buffer.state_dict()))
    second = SampleBuffer(4, "drop")
    second.load_state_dict(state)
    assert [g.uid for g in second.finished] == ["p0", "p1"]
    assert second.prompts is not None and len(second.prompts) == 0
    assert [(f.groups, f.issued) for f in second.in_flight] == [(1, 0)]
    assert second.take_prompts(1, loader)["uid"].tolist() == ["p3"]
