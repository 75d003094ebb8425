"""The sample buffer of an asynchronous run: prompt groups issued ahead, finished, bounded in staleness, sampled
oldest first (verl's V1 ``ReplayBufferAsync``, for one controller).

Versions count actor updates (the rollout engine's ``weight_version``). A prompt is *issued* at the version the
controller's trainer holds when its group is handed to generation; a group issued at version ``v`` and trained
at version ``t`` spans ``t - v + 1`` versions (verl's count: 1 = on-policy). With
``max_off_policy_threshold`` = k:

- ``drop``: a finished group spanning more than k versions is evicted and one fresh prompt is issued for it;
- ``wait``: no group is evicted for its age; sampling first waits for every in-flight group whose span has
  reached k, so that it finishes and is trained instead of growing older.

Groups the batch filters removed (DAPO's dynamic sampling) are refilled one for one too, so every step trains
exactly the batch size. The buffer is touched by the controller's thread only; generation results reach it
through :meth:`SampleBuffer.finish`, in the order they were issued.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rlcore.errors import RLCoreError

if TYPE_CHECKING:
    from rlcore.api.batch import Batch

#: the per-token policy versions a response may carry ([B, response_length], int64; 0 on padding)
VERSIONS_KEY = "rollout_versions"
#: the prefix of the staleness metrics (verl's)
PREFIX = "training/off_policy"


@dataclass
class Group:
    """One finished prompt group: its rows (the prompt's responses, scored), the version its prompt was issued at
    and generated with (when the rows carry no per-token versions), and the data loader's epoch after its prompt
    was drawn."""

    uid: str
    rows: Batch
    issued: int
    epoch: int


@dataclass
class InFlight:
    """Prompts handed to generation and not finished yet: how many groups, issued at which version."""

    groups: int
    issued: int


@dataclass
class SampleBuffer:
    """Finished groups in issue order, the prompts drawn but not issued, the generations in flight.

    ``threshold`` (None: no version control) and ``strategy`` are ``trainer.v1.sampler``'s. Call :meth:`issue`
    when prompts go to generation, :meth:`finish` with each generation's kept rows in issue order, and
    :meth:`sample` at every step."""

    threshold: int | None
    strategy: str
    finished: list[Group] = field(default_factory=list)
    prompts: Batch | None = None
    in_flight: deque[InFlight] = field(default_factory=deque)
    #: the groups the last :meth:`sample` returned
    last_sampled: list[Group] = field(default_factory=list)

    # ------------------------------------------------------------------ prompts
    def take_prompts(self, k: int, draw: Callable[[], Batch]) -> Batch:
        """``k`` prompt rows, the ones drawn earlier first, then from ``draw()`` (one data-loader batch per call);
        the rows left over stay for the next call (and in the checkpoint)."""
        from rlcore.api.batch import Batch

        parts: list[Batch] = []
        have = 0
        while have < k:
            if self.prompts is None or not len(self.prompts):
                self.prompts = draw()
            take = min(k - have, len(self.prompts))
            parts.append(self.prompts[:take])
            self.prompts = self.prompts[take:]
            have += take
        return parts[0] if len(parts) == 1 else Batch.concat(parts)

    def issue(self, groups: int, version: int) -> None:
        """Note ``groups`` prompt groups handed to generation at ``version``."""
        self.in_flight.append(InFlight(groups, version))

    def finish(self, rows: Batch, epoch: int) -> int:
        """Add the kept rows of the oldest generation in flight (one group per ``uid``); returns the number of
        its groups the batch filters removed (to refill)."""
        if not self.in_flight:
            raise RLCoreError("the sample buffer got a generation it did not issue")
        done = self.in_flight.popleft()
        uids = list(dict.fromkeys(rows["uid"])) if len(rows) else []
        for uid in uids:
            self.finished.append(Group(str(uid), rows[np.asarray(rows["uid"] == uid)], done.issued, epoch))
        return done.groups - len(uids)

    # ------------------------------------------------------------------ the bound
    def span(self, issued: int, version: int) -> int:
        """Versions a group issued at ``issued`` spans when trained at ``version`` (verl's count)."""
        return version - issued + 1

    def stale(self, version: int) -> list[Group]:
        """The finished groups ``drop`` evicts at ``version``: spanning more than the threshold."""
        if self.threshold is None or self.strategy != "drop":
            return []
        return [g for g in self.finished if self.span(g.issued, version) > self.threshold]

    def must_wait(self, version: int) -> bool:
        """Whether ``wait`` holds sampling at ``version``: a generation in flight has reached the threshold."""
        if self.threshold is None or self.strategy != "wait":
            return False
        return any(self.span(f.issued, version) >= self.threshold for f in self.in_flight)

    # ------------------------------------------------------------------ sampling
    def sample(
        self, version: int, k: int, refill: Callable[[int], None], advance: Callable[[], bool]
    ) -> tuple[Batch, dict[str, float]]:
        """``k`` groups for training at ``version``, oldest first, and the eviction metrics.

        Evicts stale groups (``drop``) and calls ``refill(n)`` to issue ``n`` fresh prompts for them; while fewer
        than ``k`` groups are finished (or ``wait`` holds), calls ``advance()`` to finish the oldest generation in
        flight (it returns False when none is). The rows come back concatenated in group order."""
        from rlcore.api.batch import Batch

        evicted: list[int] = []
        while True:
            stale = self.stale(version)
            if stale:
                evicted += [self.span(g.issued, version) for g in stale]
                gone = {id(g) for g in stale}
                self.finished = [g for g in self.finished if id(g) not in gone]
                refill(len(stale))
                continue
            if len(self.finished) >= k and not self.must_wait(version):
                break
            if not advance():
                raise RLCoreError(
                    f"the sample buffer holds {len(self.finished)} of the {k} groups a step needs and nothing is "
                    "being generated"
                )
        chosen, self.finished = self.finished[:k], self.finished[k:]
        self.last_sampled = chosen
        meta = {key: value for key, value in chosen[0].rows.meta.items() if key != "metrics"}
        parts = []
        for group in chosen:
            group.rows.meta = dict(meta)
            parts.append(group.rows)
        batch = parts[0] if len(parts) == 1 else Batch.concat(parts)
        batch.meta = dict(meta)
        metrics: dict[str, float] = {}
        if evicted:
            metrics[f"{PREFIX}/evicted_samples"] = float(len(evicted))
            metrics[f"{PREFIX}/evicted_samples_staleness/mean"] = float(np.mean(evicted))
            metrics[f"{PREFIX}/evicted_samples_staleness/max"] = float(max(evicted))
            metrics[f"{PREFIX}/evicted_samples_staleness/min"] = float(min(evicted))
        metrics.update(staleness_metrics(chosen, version))
        return batch, metrics

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The finished groups, the prompts drawn but not issued and the generations in flight (their groups and
        issue versions: the caller saves their results, waited for)."""
        return {"finished": list(self.finished), "prompts": self.prompts, "in_flight": list(self.in_flight)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.finished = list(state["finished"])
        self.prompts = state["prompts"]
        self.in_flight = deque(state["in_flight"])


def token_versions(group: Group) -> tuple[np.ndarray, np.ndarray]:
    """Each response's per-token policy versions ([rows, length]) and its response mask: the rows'
    ``rollout_versions`` when the engine tagged them, else the issue version (the whole response generated with
    it)."""
    mask = group.rows["response_mask"].bool().numpy()
    if VERSIONS_KEY in group.rows:
        return group.rows[VERSIONS_KEY].long().numpy(), mask
    return np.full(mask.shape, group.issued, dtype=np.int64), mask


def staleness_metrics(groups: list[Group], version: int) -> dict[str, float]:
    """verl's ``training/off_policy/{trajectory_spans,trajectory_staleness,trajectory_staleness_worst}/{mean,max,
    min}`` of the responses trained at ``version``, plus ``token_staleness`` (token-weighted mean lag) and
    ``crossed_version_fraction`` (responses generated under more than one version). Spans count the distinct
    versions of a response's tokens; staleness is ``version`` minus its newest (worst: oldest) token version."""
    spans: list[float] = []
    newest: list[float] = []
    oldest: list[float] = []
    lag_sum = 0.0
    tokens = 0
    for group in groups:
        versions, mask = token_versions(group)
        for row, keep in zip(versions, mask):
            used = row[keep] if keep.any() else np.array([group.issued])
            spans.append(float(len(np.unique(used))))
            newest.append(float(version - used.max()))
            oldest.append(float(version - used.min()))
            lag_sum += float((version - row[keep]).sum())
            tokens += int(keep.sum())
    metrics: dict[str, float] = {}
    for name, values in (
        ("trajectory_spans", spans),
        ("trajectory_staleness", newest),
        ("trajectory_staleness_worst", oldest),
    ):
        metrics[f"{PREFIX}/{name}/mean"] = float(np.mean(values))
        metrics[f"{PREFIX}/{name}/max"] = float(max(values))
        metrics[f"{PREFIX}/{name}/min"] = float(min(values))
    metrics[f"{PREFIX}/token_staleness"] = lag_sum / tokens if tokens else 0.0
    metrics[f"{PREFIX}/crossed_version_fraction"] = float(np.mean([s > 1 for s in spans]))
    return metrics
