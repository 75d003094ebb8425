"""``reward_model.launch_reward_fn_async``: score a batch in a background thread while the controller runs the
next stages (old and reference log-probs, values), as verl does, and measure how much of it was hidden.

The metrics of each step say what the overlap bought: ``timing_s/reward_compute`` (how long scoring ran in
the background), ``timing_s/reward_wait`` (how long the controller then still waited for it),
``timing_s/reward_overlap`` (the scoring time hidden behind the other stages: what ran before the controller
started waiting) and ``perf/reward_overlap_share`` (that as a share of the scoring time). On a loaded machine
the thread may start scoring late, even after the controller began waiting: nothing is hidden then.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlcore.api.batch import Batch


class PendingReward:
    """A reward computation running in the background; :meth:`result` waits for it."""

    def __init__(self, future: Future) -> None:
        self.future = future

    def result(self, metrics: dict[str, float]) -> Any:
        """The reward manager's result; adds the overlap metrics (see the module docstring) to ``metrics``.
        An exception raised by the reward manager is raised here."""
        start = time.perf_counter()
        value, began, ended = self.future.result()
        wait = time.perf_counter() - start
        compute_s = ended - began
        overlap = min(max(0.0, start - began), compute_s)
        metrics["timing_s/reward_compute"] = compute_s
        metrics["timing_s/reward_wait"] = wait
        metrics["timing_s/reward_overlap"] = overlap
        metrics["perf/reward_overlap_share"] = overlap / compute_s if compute_s > 0 else 0.0
        return value


def _timed(fn: Callable[[Batch], Any], batch: Batch) -> tuple[Any, float, float]:
    """``fn(batch)``, and when it began and ended (``time.perf_counter``)."""
    began = time.perf_counter()
    value = fn(batch)
    return value, began, time.perf_counter()


class AsyncReward:
    """One background thread that scores batches: :meth:`submit` returns at once with a :class:`PendingReward`."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="rlcore-reward")

    def submit(self, reward_fn: Callable[[Batch], Any], batch: Batch) -> PendingReward:
        """Start ``reward_fn`` on a shallow copy of ``batch`` in the background, so that the controller may add
        keys to ``batch`` meanwhile (it must not change the tensors already there)."""
        return PendingReward(self._pool.submit(_timed, reward_fn, batch.select(batch.keys())))

    def shutdown(self) -> None:
        """Stop the thread; a computation not started yet is cancelled."""
        self._pool.shutdown(wait=False, cancel_futures=True)
