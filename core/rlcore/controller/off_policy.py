"""One-step-off-policy training: the rollout pool generates the next batches while the trainer updates.

``async_training.enable=true`` (with ``trainer.placement=split`` and ``trainer.executor=ray``, as verl's
``recipe/one_step_off_policy``) turns the step loop into a two-stage pipeline. A single background thread,
the *rollout lane*, makes every call to the rollout group in order: it collects batches (generate, score,
batch filters) and loads the trainer's weights into the rollout engines. The controller's own thread
trains. With ``async_training.max_staleness_steps`` = k (1 by default):

- at the start of step N the lane is asked for the batch of step N + k, then the trainer waits for the
  batch of step N (``timing_s/wait_prev_gen``: zero when generation kept up);
- after the actor update the trainer exports its weights (version N) and hands them to the lane, which
  loads them into the rollout engines after the generation it is running: the trainer does not wait for
  the transfer, only the lane's next generation does. So the batch of step N + k is generated with the
  weights of step N − 1 while the trainer updates on step N, and the batch a step trains on was
  generated at most k updates ago (``async_training/staleness``; the first k steps are fresher).

The update treats the gap as off-policy data: ``old_log_probs`` are recomputed by the trainer (unless
``algorithm.rollout_correction.bypass_mode``), and the engine's ``rollout_log_probs`` (the generating
policy's; ``actor_rollout_ref.rollout.calculate_log_probs=true`` is required) feed
``algorithm.rollout_correction``'s importance weights and the mismatch metrics. Validation first waits for
the lane, so it generates with the trainer's current weights.

A checkpoint at step N waits for the batches in flight and stores them (the pickle :data:`STATE_FILE` in the
checkpoint folder; the controller adds every rollout rank's sampling state, as for any split run), so a
resumed run trains on the very batches the uninterrupted run would have, and generates the following ones
from the same random state.
"""

from __future__ import annotations

import logging
import pickle
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from omegaconf import DictConfig

from rlcore.config.async_training import ENABLE_KEY, STALENESS_KEY, async_training_enabled, check_async_training
from rlcore.config.problems import ConfigError
from rlcore.errors import RLCoreError
from rlcore.tracking.timer import StageTimer

if TYPE_CHECKING:
    from rlcore.api.batch import Batch
    from rlcore.controller.groups import WorkerGroups

log = logging.getLogger(__name__)

#: the file in a checkpoint folder that holds the batches in flight and the pipeline's counters
STATE_FILE = "async_training.pkl"

_T = TypeVar("_T")
#: what the lane runs to collect one step's batch: fills the metrics dict, times its stages on the timer
Collect = Callable[[dict[str, float], StageTimer], "Batch"]


@dataclass
class Collected:
    """One step's batch as the lane collected it."""

    step: int
    batch: Batch
    #: the collection's metrics (reward, filters, agents) and its stage times as ``timing_s/<stage>``
    metrics: dict[str, float]
    #: the policy version (actor updates so far) the rollout engines served while generating it
    version: int
    #: the training epoch of the data loader once its prompts were drawn
    epoch: int
    #: seconds the lane spent collecting it
    seconds: float


@dataclass
class _Saved:
    """What :meth:`RolloutPipeline.save` writes: the counters, the batches in flight, the rollout states."""

    version: int
    served: int
    submitted: int
    in_flight: list[Collected]
    synced: dict[int, dict[str, float]] = field(default_factory=dict)


class RolloutPipeline:
    """The rollout lane of one run: batches collected ahead, weights loaded behind the trainer's back.

    ``collect`` is the controller's batch collection; ``epoch`` reads the data loader's epoch; ``total_steps``
    bounds what is collected ahead. The controller calls :meth:`next_batch` at the start of every step,
    :meth:`push_weights` after every actor update, :meth:`drain` before validating, :meth:`save` /
    :meth:`load` with its checkpoints and :meth:`close` at the end.
    """

    def __init__(
        self,
        groups: WorkerGroups,
        collect: Collect,
        epoch: Callable[[], int],
        total_steps: int,
        max_staleness: int,
    ) -> None:
        if not groups.split:
            raise ConfigError(f"{ENABLE_KEY}=true needs trainer.placement=split")
        self.groups = groups
        self.collect = collect
        self.epoch = epoch
        self.total_steps = total_steps
        self.max_staleness = max_staleness
        self.version = 0  # the trainer's policy version: actor updates so far (controller thread)
        self._served = 0  # the version the rollout engines hold, in lane order (lane thread)
        self._submitted = 0  # the last step whose batch was handed to the lane
        self._pending: deque[Future[Collected]] = deque()
        self._synced: dict[int, dict[str, float]] = {}  # finished weight syncs' metrics by version, not reported yet
        self._error: BaseException | None = None
        self._lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlcore-rollout-lane")

    @classmethod
    def from_config(
        cls, config: DictConfig, groups: WorkerGroups, collect: Collect, epoch: Callable[[], int], total_steps: int
    ) -> RolloutPipeline | None:
        """The pipeline ``async_training`` asks for (validated), or None when it is off."""
        check_async_training(config)
        if not async_training_enabled(config):
            return None
        return cls(groups, collect, epoch, total_steps, int(config.async_training.max_staleness_steps))

    # ------------------------------------------------------------------ the lane
    def _submit(self, fn: Callable[..., _T], *args: Any) -> Future[_T]:
        """Queue ``fn(*args)`` on the lane; after a lane call failed, every later one fails with it."""

        def run() -> _T:
            if self._error is not None:
                raise RLCoreError(f"the rollout lane stopped after an earlier failure: {self._error}") from self._error
            try:
                return fn(*args)
            except BaseException as exc:
                self._error = exc
                raise

        return self._lane.submit(run)

    def _collect(self, step: int) -> Collected:
        """Collect the batch of ``step`` (lane thread)."""
        metrics: dict[str, float] = {}
        timer = StageTimer()
        start = time.perf_counter()
        batch = self.collect(metrics, timer)
        seconds = time.perf_counter() - start
        metrics.update({f"timing_s/{stage}": s for stage, s in timer.pop_all().items()})
        return Collected(step, batch, metrics, self._served, self.epoch(), seconds)

    def _receive(self, state: dict[str, Any], version: int) -> None:
        """Load the trainer's weights of ``version`` into the rollout engines (lane thread); their metrics are
        reported with the first batch generated with them."""
        start = time.perf_counter()
        metrics = dict(self.groups.rollout.receive_weights(state))
        metrics["actor/weight_sync_s"] = time.perf_counter() - start
        self._synced[version] = metrics
        self._served = version

    # ------------------------------------------------------------------ the step
    def next_batch(self, step: int, metrics: dict[str, float]) -> tuple[Batch, int]:
        """The batch of ``step`` and the data loader's epoch after its prompts; first asks the lane for the
        batches up to step + ``max_staleness``. Adds the collection's metrics, those of the weight transfers
        the batch was generated after (not reported yet), ``async_training/staleness``, ``timing_s/wait_prev_gen`` and
        ``async_training/overlap_share`` (the share of the batch's collection time the trainer did not wait
        for) to ``metrics``."""
        last = min(step + self.max_staleness, self.total_steps)
        while self._submitted < last:
            self._submitted += 1
            self._pending.append(self._submit(self._collect, self._submitted))
        start = time.perf_counter()
        item = self._pending.popleft().result()
        waited = time.perf_counter() - start
        staleness = self.version - item.version
        if item.step != step or not 0 <= staleness <= self.max_staleness:
            raise RLCoreError(
                f"step {step}: the rollout lane delivered the batch of step {item.step}, generated {staleness} "
                f"update(s) ago ({STALENESS_KEY}={self.max_staleness}); the pipeline is out of order"
            )
        metrics.update(item.metrics)
        for version in sorted(v for v in self._synced if v <= item.version):  # done before this batch's generation
            metrics.update(self._synced.pop(version))
        metrics["async_training/staleness"] = float(staleness)
        metrics["timing_s/wait_prev_gen"] = waited
        metrics["async_training/overlap_share"] = max(0.0, 1.0 - waited / item.seconds) if item.seconds > 0 else 0.0
        return item.batch, item.epoch

    def push_weights(self) -> dict[str, float]:
        """Export the trainer's weights after an actor update and queue their transfer to the rollout engines;
        returns ``actor/weight_export_s`` (the trainer's part; the transfer's metrics come with the first batch
        generated with these weights). A failed transfer fails the lane's next call."""
        start = time.perf_counter()
        state = self.groups.actor.export_weights()
        self.version += 1
        self._submit(self._receive, state, self.version)
        return {"actor/weight_export_s": time.perf_counter() - start}

    def drain(self) -> None:
        """Wait until the lane has done everything queued so far (the rollout engines then serve the
        trainer's current weights); raises the error of a failed lane call."""
        self._submit(lambda: None).result()

    # ------------------------------------------------------------------ checkpoints
    def save(self, folder: Path) -> None:
        """Write :data:`STATE_FILE` into the checkpoint ``folder``: the batches in flight (waited for) and the
        counters; the controller then saves the rollout ranks' sampling state (``rollout_state.pkl``, as for
        every split run). Call it before the data loader's state is read."""
        self.drain()
        saved = _Saved(
            version=self.version,
            served=self._served,
            submitted=self._submitted,
            in_flight=[future.result() for future in self._pending],
            synced=dict(self._synced),
        )
        (folder / STATE_FILE).write_bytes(pickle.dumps(saved, protocol=pickle.HIGHEST_PROTOCOL))

    def load(self, folder: Path, step: int) -> None:
        """Restore what :meth:`save` wrote into ``folder`` after the trainer's weights were synced; a checkpoint
        of a synchronous run (no :data:`STATE_FILE`) starts the pipeline afresh after ``step``."""
        file = folder / STATE_FILE
        if not file.exists():
            self._submitted = step
            log.info("%s has no %s (a synchronous run): the pipeline starts at step %d", folder, STATE_FILE, step + 1)
            return
        try:
            saved = pickle.loads(file.read_bytes())  # noqa: S301 - the run's own checkpoint, like its torch files
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
            raise RLCoreError(
                f"{file}: cannot read the one-step-off-policy state ({type(exc).__name__}: {exc})"
            ) from exc
        if not isinstance(saved, _Saved) or saved.submitted - step != len(saved.in_flight):
            raise RLCoreError(f"{file}: not the one-step-off-policy state of step {step}")
        if len(saved.in_flight) > self.max_staleness:
            raise RLCoreError(
                f"{file} holds {len(saved.in_flight)} batches in flight, more than {STALENESS_KEY}="
                f"{self.max_staleness} allows: resume with the run's {STALENESS_KEY}"
            )
        self.version, self._served, self._submitted = saved.version, saved.served, saved.submitted
        self._synced = dict(saved.synced)
        for item in saved.in_flight:
            future: Future[Collected] = Future()
            future.set_result(item)
            self._pending.append(future)

    def close(self, wait: bool) -> None:
        """Stop the lane: queued calls are dropped; with ``wait`` (a run that completed), the running one is
        waited for, and a failure nobody saw (of the last weight transfer, which no generation needed) is
        logged: the trainer's weights and checkpoints are not affected by it."""
        self._lane.shutdown(wait=wait, cancel_futures=True)
        if wait and self._error is not None:
            log.error("the rollout lane failed after the last step: %s", self._error)
