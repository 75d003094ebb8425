"""Asynchronous training: prompt groups issued ahead into a sample buffer, generated in the step
(``trainer.v1.trainer_mode=colocate_async``) or by a rollout lane beside the trainer (``separate_async``, and
one-step-off-policy training, ``async_training.enable``, its special case); docs/async-training.md.

At the start of step N the controller issues the prompt groups up to N batches plus the plan's groups ahead
(``num_warmup_batches`` × ``data.train_batch_size``; one-step-off: ``max_staleness_steps`` batches), never
beyond ``trainer.total_training_steps`` batches, each tagged with the trainer's policy version (actor updates so
far). Then it samples the step's ``data.train_batch_size`` groups from the buffer, oldest first
(:class:`~rlcore.controller.sample_buffer.SampleBuffer`: the staleness bound, refills one for one).

Without a lane (colocate_async) every issued generation runs at once, in the step, with the current weights,
which the step's end syncs into the engines as the synchronous loop does. With a lane (separate_async) one
background thread makes every call to the rollout group in order: it generates (generate, score, batch
filters) and loads the trainer's weights, exported after each actor update, between generations; the trainer
waits only for the groups it samples (``timing_s/wait_prev_gen``).

The update treats the data as off-policy: ``old_log_probs`` are the trainer's recomputation (unless
``algorithm.rollout_correction.bypass_mode``) and the engine's ``rollout_log_probs`` (required) feed
``algorithm.rollout_correction``. Validation first waits for the lane.

With ``trainer.v1.partial_rollout_tokens`` = c > 0, an issued generation is a :class:`Partial`, and generation
goes in *rounds*: a round advances every generation in flight together by at most c more tokens per row
(``groups.rollout.generate_partial``) and finishes the oldest ones whose rows all ended (score, batch filters).
The step consumes rounds until the buffer can serve its batch. The unfinished rows are kept (tokens, log-probs,
versions, row seeds) and continue under the next weights, so a response may span several versions; each chunk's
new tokens are tagged with the trainer's policy version the engines serve (:func:`tag_versions`: the one place
engine versions become the trainer's). Without a lane (colocate_async) the rounds run in the step and the step's
end syncs the weights. With a lane (separate_async) every round is a lane call, queued by the controller: the
step queues the rounds it needs (one at a time, waiting for each), then, once its batch is sampled,
``rounds_ahead`` more that the lane runs while the trainer trains; the step's new weights are queued after them.
So the weights of step N load after round r_N + ``rounds_ahead`` (r_N: the round that let step N's batch be
served), whatever the two lanes' speeds: the lane's calls, and so every token and version, are a function of the
run's sequence alone, never of thread timing.

A checkpoint at step N waits for the generations in flight and stores them with the buffer (the pickle
:data:`STATE_FILE`; the controller adds every rollout rank's sampling state, as for any split run), so a resumed
run samples exactly what the uninterrupted run would have, and generates the following groups from the same
random state: nothing in flight is regenerated. Partial generations are saved as they are (their rows so far),
with the results of the rounds run ahead, and continue after the resume under the same weights as in the
uninterrupted run.
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

from rlcore.config.async_training import AsyncPlan, async_plan, check_async_training
from rlcore.config.problems import ConfigError
from rlcore.controller.sample_buffer import SampleBuffer
from rlcore.errors import RLCoreError
from rlcore.tracking.timer import StageTimer
from rlcore.tracking.values import reduce_metrics

if TYPE_CHECKING:
    from rlcore.api.batch import Batch
    from rlcore.controller.groups import WorkerGroups

log = logging.getLogger(__name__)

#: the file in a checkpoint folder that holds the sample buffer, the generations in flight and the counters
STATE_FILE = "async_training.pkl"

_T = TypeVar("_T")
#: what generates one round of prompts: generate (unless given the generated rows), score, batch filters; returns
#: the kept rows, fills the metrics dict, times its stages on the timer
Collect = Callable[["Batch", dict[str, float], StageTimer, "Batch | None"], "Batch"]
#: the keys of a partial-rollout output that only the next chunk reads
_CHUNK_ONLY = ("finished", "row_seeds")


@dataclass
class Generated:
    """One generation as it finished: the kept rows and what was measured."""

    rows: Batch
    #: the generation's metrics (reward, filters, agents) and its stage times as ``timing_s/<stage>``
    metrics: dict[str, float]
    #: the policy version the rollout engines served while generating
    version: int
    #: the training epoch of the data loader once its prompts were drawn
    epoch: int
    #: seconds the generation took
    seconds: float


@dataclass
class Partial:
    """A generation in partial-rollout chunks: the prompt groups issued, their rows (the prompts as the engine
    generates them, then the last chunk's output), the data loader's epoch once the prompts were drawn, the
    seconds spent on its chunks and the tokens they generated (``rollout/gen_tokens``, summed)."""

    prompts: Batch
    rows: Batch
    epoch: int
    seconds: float = 0.0
    gen_tokens: float = 0.0

    @property
    def done(self) -> bool:
        """Every row has ended (EOS or its length limit)."""
        return "finished" in self.rows and bool(self.rows["finished"].all())


def tag_versions(before: Batch, after: Batch, version: int) -> None:
    """Tag the response tokens a chunk added (in ``after``'s ``response_mask``, not in ``before``'s) with the
    trainer's policy ``version`` (the engine counts its own weight updates from another origin)."""
    new = after["response_mask"].bool()
    if "response_mask" in before:
        new = new & ~before["response_mask"].bool()
    versions = after["rollout_versions"].clone()
    versions[new] = version
    after["rollout_versions"] = versions


@dataclass
class _Saved:
    """What :meth:`RolloutPipeline.save` writes."""

    version: int
    served: int
    issued: int
    buffer: dict[str, Any]
    in_flight: list[Generated]
    synced: dict[int, dict[str, float]] = field(default_factory=dict)
    partial: list[Partial] = field(default_factory=list)
    #: the generations finished by the lane's rounds ahead, one list per round, not taken into the buffer yet
    rounds: list[list[Generated]] = field(default_factory=list)


def _done(result: _T) -> Future[_T]:
    """A future that already holds ``result`` (a saved lane call's)."""
    future: Future[_T] = Future()
    future.set_result(result)
    return future


class RolloutPipeline:
    """The sample buffer of an asynchronous run and what feeds it (the lane, or the step itself).

    ``collect`` generates one round of prompts; ``draw`` gives the data loader's next prompt batch (with uids);
    ``epoch`` reads the data loader's epoch; ``total_steps`` × ``batch_size`` bounds what is issued for steps;
    ``max_rounds`` (``algorithm.max_num_gen_batches``, 0: none) bounds the generations one step may wait for.
    The controller calls :meth:`next_batch` at the start of every step, :meth:`push_weights` after every actor
    update, :meth:`drain` before validating, :meth:`save` / :meth:`load` with its checkpoints and :meth:`close`
    at the end.
    """

    def __init__(
        self,
        groups: WorkerGroups,
        collect: Collect,
        draw: Callable[[], Batch],
        epoch: Callable[[], int],
        total_steps: int,
        batch_size: int,
        plan: AsyncPlan,
        max_rounds: int = 0,
        expand: Callable[[Batch], Batch] | None = None,
    ) -> None:
        if plan.lane and not groups.split:
            raise ConfigError(f"{plan.source} needs trainer.placement=split")
        self.groups = groups
        self.collect = collect
        self.draw = draw
        self.epoch = epoch
        self.total_steps = total_steps
        self.batch_size = batch_size
        self.plan = plan
        self.max_rounds = max_rounds
        self.expand = expand
        self.buffer = SampleBuffer(plan.threshold, plan.strategy)
        self.version = 0  # the trainer's policy version: actor updates so far (controller thread)
        self._served = 0  # the version the rollout engines hold, in lane order (lane thread)
        self._issued = 0  # prompt groups issued for steps (refills not counted)
        self._pending: deque[Future[Generated]] = deque()
        self._partial: deque[Partial] = deque()  # partial rollout: the generations in flight (lane thread)
        self._rounds: deque[Future[list[Generated]]] = deque()  # the lane's rounds ahead, not consumed yet
        self._synced: dict[int, dict[str, float]] = {}  # finished weight syncs' metrics by version, not reported yet
        self._error: BaseException | None = None
        self._lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlcore-rollout-lane") if plan.lane else None

    @classmethod
    def from_config(
        cls,
        config: DictConfig,
        groups: WorkerGroups,
        collect: Collect,
        draw: Callable[[], Batch],
        epoch: Callable[[], int],
        total_steps: int,
        expand: Callable[[Batch], Batch] | None = None,
    ) -> RolloutPipeline | None:
        """The pipeline ``trainer.v1`` / ``async_training`` ask for (validated), or None for the sync loop;
        ``expand`` lays prompts out as the engine generates them (partial rollout)."""
        check_async_training(config)
        plan = async_plan(config)
        if plan is None:
            return None
        batch_size = int(config.data.train_batch_size)
        return cls(
            groups,
            collect,
            draw,
            epoch,
            total_steps,
            batch_size,
            plan,
            int(config.algorithm.max_num_gen_batches),
            expand,
        )

    # ------------------------------------------------------------------ the lane
    def _submit(self, fn: Callable[..., _T], *args: Any) -> Future[_T]:
        """Queue ``fn(*args)`` on the lane (without one: run it now); after a lane call failed, every later one
        fails with it."""

        def run() -> _T:
            if self._error is not None:
                raise RLCoreError(f"the rollout lane stopped after an earlier failure: {self._error}") from self._error
            try:
                return fn(*args)
            except BaseException as exc:
                self._error = exc
                raise

        if self._lane is not None:
            return self._lane.submit(run)
        return _done(run())

    def _generate(self, prompts: Batch, epoch: int) -> Generated:
        """Generate one round of ``prompts`` (lane thread, or the step's without a lane)."""
        metrics: dict[str, float] = {}
        timer = StageTimer()
        start = time.perf_counter()
        rows = self.collect(prompts, metrics, timer, None)
        seconds = time.perf_counter() - start
        metrics.update({f"timing_s/{stage}": s for stage, s in timer.pop_all().items()})
        return Generated(rows, metrics, self._served, epoch, seconds)

    def _chunk(self) -> list[Generated]:
        """Partial rollout, one round (lane thread, or the step's without a lane): advance every generation in
        flight by one chunk, then score the oldest ones whose rows all ended; returns them in issue order (perhaps
        none)."""
        for item in self._partial:
            if item.done:
                continue
            start = time.perf_counter()
            batch = item.rows
            batch.meta["max_new_tokens"] = self.plan.chunk
            out = self.groups.rollout.generate_partial(batch)
            tag_versions(batch, out, self._served)
            item.gen_tokens += reduce_metrics(out.meta.get("metrics", {})).get("rollout/gen_tokens", 0.0)
            item.rows = out
            item.seconds += time.perf_counter() - start
        finished: list[Generated] = []
        while self._partial and self._partial[0].done:
            item = self._partial.popleft()
            generated = item.rows.select([k for k in item.rows.keys() if k not in _CHUNK_ONLY])
            generated.meta = {k: v for k, v in item.rows.meta.items() if k != "max_new_tokens"}
            generated.meta["metrics"] = {**generated.meta.get("metrics", {}), "rollout/gen_tokens": item.gen_tokens}
            metrics: dict[str, float] = {}
            timer = StageTimer()
            start = time.perf_counter()
            rows = self.collect(item.prompts, metrics, timer, generated)
            seconds = item.seconds + time.perf_counter() - start
            metrics.update({f"timing_s/{stage}": s for stage, s in timer.pop_all().items()})
            metrics["timing_s/gen"] = metrics.get("timing_s/gen", 0.0) + item.seconds
            newest = int(generated["rollout_versions"].max()) if len(generated) else self._served
            finished.append(Generated(rows, metrics, newest, item.epoch, seconds))
        return finished

    def _receive(self, state: dict[str, Any], version: int) -> None:
        """Load the trainer's weights of ``version`` into the rollout engines (lane thread); their metrics are
        reported with the first step that samples groups generated with them."""
        start = time.perf_counter()
        metrics = dict(self.groups.rollout.receive_weights(state))
        metrics["actor/weight_sync_s"] = time.perf_counter() - start
        self._synced[version] = metrics
        self._served = version

    def _issue(self, groups: int) -> None:
        """Hand ``groups`` fresh prompts to generation at the trainer's version, one data-loader batch at most
        per generation."""
        while groups > 0:
            n = min(groups, self.batch_size)
            prompts = self.buffer.take_prompts(n, self.draw)
            self.buffer.issue(n, self.version)
            if self.plan.chunk and self.expand is not None:  # joins the lane's rounds after the calls queued so far
                self._submit(self._partial.append, Partial(prompts, self.expand(prompts), self.epoch()))
            else:
                self._pending.append(self._submit(self._generate, prompts, self.epoch()))
            groups -= n

    # ------------------------------------------------------------------ the step
    def next_batch(self, step: int, metrics: dict[str, float]) -> tuple[Batch, int]:
        """The batch of ``step`` and the data loader's epoch after its newest group's prompt: issues the groups up
        to ``step`` batches plus the plan's groups ahead, then samples ``data.train_batch_size`` groups (evicting
        and refilling). Adds the metrics of the generations finished for it, those of the weight transfers they
        were generated after (not reported yet), the buffer's ``training/off_policy/*``,
        ``async_training/staleness``, ``timing_s/wait_prev_gen`` and ``async_training/overlap_share`` (the share
        of the step's finished generation time the trainer did not wait for). With a lane and partial rollout it
        then queues the plan's rounds ahead (none after the last step)."""
        target = min(step * self.batch_size + self.plan.ahead, self.total_steps * self.batch_size)
        if target > self._issued:
            self._issue(target - self._issued)
            self._issued = target
        finished: list[Generated] = []

        def advance() -> bool:
            if not self.buffer.in_flight:
                return False
            if 0 < self.max_rounds <= len(finished):
                raise RLCoreError(
                    f"step {step}: {len(finished)} generations did not give the {self.batch_size} prompt groups a "
                    f"step needs (algorithm.max_num_gen_batches={self.max_rounds}); raise the limit or check the "
                    "batch filters and the staleness bound"
                )
            if self.plan.chunk:  # the oldest round run ahead, else one more round now
                done = (self._rounds.popleft() if self._rounds else self._submit(self._chunk)).result()
            else:
                done = [self._pending.popleft().result()]
            for item in done:
                finished.append(item)
                refill = self.buffer.finish(item.rows, item.epoch)
                if refill:
                    self._issue(refill)
            return True

        start = time.perf_counter()
        batch, buffer_metrics = self.buffer.sample(self.version, self.batch_size, self._issue, advance)
        waited = time.perf_counter() - start
        for done in finished:
            metrics.update(done.metrics)
        newest = max((done.version for done in finished), default=-1)
        for version in sorted(v for v in self._synced if v <= newest):  # done before these generations
            metrics.update(self._synced.pop(version))
        metrics.update(buffer_metrics)
        worst = buffer_metrics["training/off_policy/trajectory_staleness_worst/max"]
        bound = self.plan.threshold
        if self.plan.strategy == "drop" and bound is not None and worst + 1 > bound:
            raise RLCoreError(f"step {step}: sampled a group spanning {worst + 1:g} versions, beyond the bound {bound}")
        metrics["async_training/staleness"] = worst
        metrics["timing_s/wait_prev_gen"] = waited
        seconds = sum(done.seconds for done in finished)
        metrics["async_training/overlap_share"] = max(0.0, 1.0 - waited / seconds) if seconds > 0 else 1.0
        if step < self.total_steps:  # the lane's rounds while the trainer trains; the new weights load after them
            self._rounds.extend(self._submit(self._chunk) for _ in range(self.plan.rounds_ahead))
        return batch, max(group.epoch for group in self.buffer.last_sampled)

    def push_weights(self) -> dict[str, float]:
        """After an actor update: with a lane, export the trainer's weights and queue their transfer to the
        rollout engines (returns ``actor/weight_export_s``; the transfer's metrics come with the first step
        sampling groups generated with them; a failed transfer fails the lane's next call); without one, sync
        them now as the synchronous loop does (returns its metrics)."""
        start = time.perf_counter()
        if self._lane is None:
            self.version += 1
            self._served = self.version
            return reduce_metrics(self.groups.sync_weights())
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
        """Write :data:`STATE_FILE` into the checkpoint ``folder``: the buffer, the generations in flight
        (waited for) and the counters; the controller then saves the rollout ranks' sampling state
        (``rollout_state.pkl``, as for every split run). Call it before the data loader's state is read."""
        self.drain()
        saved = _Saved(
            version=self.version,
            served=self._served,
            issued=self._issued,
            buffer=self.buffer.state_dict(),
            in_flight=[future.result() for future in self._pending],
            synced=dict(self._synced),
            partial=list(self._partial),
            rounds=[future.result() for future in self._rounds],
        )
        (folder / STATE_FILE).write_bytes(pickle.dumps(saved, protocol=pickle.HIGHEST_PROTOCOL))

    def load(self, folder: Path, step: int) -> None:
        """Restore what :meth:`save` wrote into ``folder`` after the trainer's weights were synced; a checkpoint
        of a synchronous run (no :data:`STATE_FILE`) starts the buffer afresh after ``step``."""
        file = folder / STATE_FILE
        if not file.exists():
            self._issued = step * self.batch_size
            self.version = self._served = step
            log.info("%s has no %s (a synchronous run): the buffer starts at step %d", folder, STATE_FILE, step + 1)
            return
        try:
            saved = pickle.loads(file.read_bytes())  # noqa: S301 - the run's own checkpoint, like its torch files
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
            raise RLCoreError(
                f"{file}: cannot read the asynchronous training state ({type(exc).__name__}: {exc})"
            ) from exc
        if not isinstance(saved, _Saved) or len(saved.in_flight) + len(saved.partial) + sum(
            len(done) for done in saved.rounds
        ) != len(saved.buffer["in_flight"]):
            raise RLCoreError(f"{file}: not the asynchronous training state of step {step}")
        self.version, self._served, self._issued = saved.version, saved.served, saved.issued
        self.buffer.load_state_dict(saved.buffer)
        self._synced = dict(saved.synced)
        self._pending = deque(_done(item) for item in saved.in_flight)
        self._rounds = deque(_done(done) for done in saved.rounds)
        self._partial = deque(saved.partial)

    def close(self, wait: bool) -> None:
        """Stop the lane: queued calls are dropped; with ``wait`` (a run that completed), the running one is
        waited for, and a failure nobody saw (of the last weight transfer, which no generation needed) is
        logged: the trainer's weights and checkpoints are not affected by it."""
        if self._lane is None:
            return
        self._lane.shutdown(wait=wait, cancel_futures=True)
        if wait and self._error is not None:
            log.error("the rollout lane failed after the last step: %s", self._error)
