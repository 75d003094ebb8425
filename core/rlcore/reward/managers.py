"""Reward managers: decode responses, call the scorer safely, and put each score on its last valid token.

Safe scoring
------------
A scorer is user code run on model output, so it may raise, loop forever or return garbage. Every
manager scores through a :class:`~rlcore.reward.pool.ScorerPool` of ``reward_model.scorer_workers``
forked processes and :meth:`RewardManagerBase._collect`:

- the samples of a batch are scored concurrently; a call running past ``reward_model.scorer_timeout``
  seconds is killed (its process, so nothing keeps running), and the whole batch's scoring stops at
  ``reward_model.scorer_batch_timeout`` seconds;
- an exception, a timeout, a dead scorer process or a value that is not a finite number (NaN, inf, a string,
  a dict without ``"score"``) scores that sample 0;
- each failure kind is logged once per call (how many samples, and the first one's data_source, index
  and error) and counted in ``reward/scorer_errors``, ``reward/scorer_timeouts`` and ``reward/scorer_nan``;
- with ``reward_model.scorer_fail_fast=true`` the first failure stops the scoring (samples in flight are
  killed) and raises :class:`RewardError`;
- an :class:`RLCoreError` raised by the scorer (for example an unknown ``data_source``) is a configuration
  error and always propagates.

``scorer_timeout`` of 0 or null scores inline in the controller, one sample after another, without any
time limit (for debugging a scorer); each call gets its own deep copy of its arguments, as a scorer
process gets its pickled copy, so that a scorer that changes its ``extra_info`` scores the same either way.

A scorer that calls ``sys.exit()`` or ``os._exit()`` (or raises ``KeyboardInterrupt`` without a Ctrl-C),
inline or in a scorer process, stops the run with a :class:`~rlcore.usercode.UserCodeExit` naming the line
(in a scorer process, ``os._exit()`` is the death of that process: an error of its sample). Each inline call
runs in :func:`~rlcore.usercode.user_call` (the run's stop handlers put back after it, the processes it
leaves running killed with the run, its output kept from them, a child it forks that returns ended) and
:func:`~rlcore.reward.torch_state.restore_torch_state` (torch's global switches set back).

Ground truths: for data sources whose registered scorer compares text (``ground_truth="text"``) the
ground truth is passed as text (``33.0`` → ``"33"``, :mod:`rlcore.reward.ground_truth`); those without a
clear text form (None, NaN, several answers) are passed as they are, counted in
``reward/ground_truth_nonstring`` and warned about once per data source. A custom reward function gets the
ground truth as the data holds it (as in verl).
"""

from __future__ import annotations

import copy
import logging
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from rlcore.api.components import RewardResult
from rlcore.config.sections.base import to_plain
from rlcore.config.sections.reward_model import RewardModelConfig
from rlcore.errors import RLCoreError
from rlcore.reward.errors import RewardError
from rlcore.reward.ground_truth import ground_truth_text
from rlcore.reward.pool import Outcome, ScorerPool, scorer_label
from rlcore.reward.scoring import RegistryScorer
from rlcore.reward.torch_state import restore_torch_state
from rlcore.usercode import user_call

logger = logging.getLogger(__name__)

#: failure kind -> the counter metric it increments
FAILURE_METRICS: dict[str, str] = {
    "error": "reward/scorer_errors",
    "timeout": "reward/scorer_timeouts",
    "invalid": "reward/scorer_nan",
}
_FAILURE_WORDS = {
    "error": "raised an exception",
    "timeout": "timed out",
    "invalid": "returned a value that is not a finite number",
}


def to_score(value: Any) -> tuple[float | None, dict[str, Any]]:
    """Split a scorer's return value into ``(score, extra)``; ``score`` is ``None`` when it is not a finite
    number. A dict must carry ``"score"``; its other keys are the extra information."""
    extra: dict[str, Any] = {}
    if isinstance(value, Mapping):
        if "score" not in value:
            return None, {}
        extra = {k: v for k, v in value.items() if k != "score"}
        value = value["score"]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    elif isinstance(value, np.ndarray) and value.size == 1:
        value = value.item()
    if isinstance(value, numbers.Real):
        number = float(value)
        if math.isfinite(number):
            return number, extra
    return None, extra


def _column(batch: Any, key: str) -> Any:
    if key not in batch:
        raise RewardError(f"the reward manager needs batch key {key!r}; the batch has {sorted(batch.keys())}")
    return batch[key]


class RewardManagerBase:
    """The base of reward managers that decode responses and put one score per sample on its last valid token.

    The built-in managers and rlcore-plugin-judge's subclass it. It reads the ``reward_model`` options and
    offers safe scoring (:meth:`_score_calls`, :meth:`_collect`) and, for a subclass that scores another way,
    :meth:`_inputs` (decoded responses, data sources, ground truths), :meth:`_place` (each score on its last
    valid token), :meth:`_examine` (``num_examine``) and :meth:`close`. A subclass implements
    ``__call__(batch) -> RewardResult``.
    """

    def __init__(self, tokenizer: Any, scorer: Callable[..., Any], config: RewardModelConfig | None = None) -> None:
        """``config`` is the typed ``reward_model`` section (with the fields the plugins add there; None: its
        defaults): ``scorer_timeout`` (0 or null: inline, no limit), ``scorer_batch_timeout`` (0 or null: no
        bound), ``scorer_workers``, ``scorer_output_bytes``, ``scorer_fail_fast``, ``num_examine``,
        ``reward_kwargs``."""
        self.tokenizer = tokenizer
        self.scorer = scorer
        self.config = config or RewardModelConfig()
        self.timeout = float(self.config.scorer_timeout or 0.0)
        self.batch_timeout = float(self.config.scorer_batch_timeout or 0.0)
        self.workers = int(self.config.scorer_workers)
        self.output_bytes = int(self.config.scorer_output_bytes)
        self.fail_fast = bool(self.config.scorer_fail_fast)
        self.num_examine = int(self.config.num_examine)
        self.reward_kwargs: dict[str, Any] = dict(to_plain(self.config.reward_kwargs))
        self._pool: ScorerPool | None = None
        self._warned_sources: set[Any] = set()  # data sources already warned about for their ground truths

    def _score_calls(self, calls: list[dict[str, Any]], fail_fast: bool | None = None) -> list[Outcome | None]:
        """``self.scorer(**kwargs)`` for each of ``calls``: in the scorer processes with the time limits, or
        inline when ``scorer_timeout`` is 0. Under fail-fast the scoring stops at the first failure (a
        non-finite score included) and the samples not scored are ``None``."""
        stop = self.fail_fast if fail_fast is None else fail_fast
        if self.timeout <= 0:
            outcomes: list[Outcome | None] = []
            for kwargs in calls:
                what = scorer_label(kwargs)
                with user_call(what), restore_torch_state(what):
                    try:
                        outcome = Outcome("ok", self.scorer(**copy.deepcopy(kwargs)))
                    except Exception as exc:  # noqa: BLE001 - reported by _collect
                        outcome = Outcome("error", exc)
                outcomes.append(outcome)
                if stop and _failed(outcomes[-1]):
                    break
            return outcomes + [None] * (len(calls) - len(outcomes))
        if self._pool is None:
            self._pool = ScorerPool(self.scorer, self.workers, self.timeout, self.batch_timeout, self.output_bytes)
        return self._pool.map(calls, stop=_failed if stop else None)

    def close(self) -> None:
        """End the scorer processes (a later call starts new ones)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _inputs(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor, list[str], list[Any], list[Any], list[Any]]:
        """``(responses, valid_lengths, solution_strs, data_sources, ground_truths, extra_infos)``.

        The valid length is ``attention_mask[:, -R:].sum()`` when the batch has ``prompts`` and an
        attention mask over ``P + R`` (it counts tokens such as tool output that ``response_mask``
        excludes), else ``response_mask.sum()``.
        """
        responses = _column(batch, "responses")
        width = responses.shape[1]
        full_mask = "prompts" in batch and "attention_mask" in batch
        if full_mask and batch["attention_mask"].shape[1] == batch["prompts"].shape[1] + width:
            valid = batch["attention_mask"][:, -width:].sum(dim=-1)
        else:
            valid = _column(batch, "response_mask").sum(dim=-1)
        valid = valid.long()
        ids = [responses[i, : int(valid[i])].tolist() for i in range(len(responses))]
        texts = self.tokenizer.batch_decode(ids, skip_special_tokens=True)
        data_sources = list(_column(batch, "data_source"))
        reward_models = _column(batch, "reward_model")
        ground_truths = [rm.get("ground_truth") if isinstance(rm, Mapping) else None for rm in reward_models]
        extra_infos = list(batch["extra_info"]) if "extra_info" in batch else [None] * len(responses)
        return responses, valid, texts, data_sources, ground_truths, extra_infos

    def _text_ground_truths(self, sources: list[Any], truths: list[Any]) -> tuple[list[Any], dict[str, float]]:
        """The ground truths with those of text-comparing scorers as text (a :class:`RegistryScorer` only);
        the metric ``reward/ground_truth_nonstring`` counts those without a clear text form, and the first
        such value of each data source is warned about once."""
        if not isinstance(self.scorer, RegistryScorer):
            return truths, {}
        out = list(truths)
        unclear: dict[Any, list[int]] = {}
        for i, (source, truth) in enumerate(zip(sources, truths)):
            if isinstance(truth, str) or not self.scorer.compares_text(source):
                continue
            text = ground_truth_text(truth)
            if text is None:
                unclear.setdefault(source, []).append(i)
            else:
                out[i] = text
        for source, rows in unclear.items():
            if source not in self._warned_sources:
                self._warned_sources.add(source)
                logger.warning(
                    "data_source %r: the ground truth of sample %d is %r, which has no clear text form, and its "
                    "scorer compares text: such samples probably score 0 (%d in this batch; counted in "
                    "reward/ground_truth_nonstring; this warning is shown once per data source)",
                    source,
                    rows[0],
                    truths[rows[0]],
                    len(rows),
                )
        return out, {"reward/ground_truth_nonstring": float(sum(len(rows) for rows in unclear.values()))}

    def _collect(
        self, outcomes: list[Outcome | None], data_sources: list[Any]
    ) -> tuple[list[float], dict[str, list], dict[str, float]]:
        """Validate outcomes: failures score 0, are logged once per kind and counted (or raise when
        fail-fast); dict extras become per-sample lists. ``None`` (not scored: fail-fast stopped first) is
        skipped."""
        n = len(outcomes)
        scores = [0.0] * n
        extras: dict[str, list] = {}
        failures: dict[str, list[tuple[int, str]]] = {kind: [] for kind in FAILURE_METRICS}
        for i, outcome in enumerate(outcomes):
            if outcome is None:
                continue
            if outcome.kind == "error" and isinstance(outcome.value, RLCoreError):
                raise outcome.value
            if outcome.kind == "error":
                failures["error"].append((i, f"{type(outcome.value).__name__}: {outcome.value}"))
                continue
            if outcome.kind == "timeout":
                failures["timeout"].append((i, self._timeout_detail(outcome)))
                continue
            score, extra = to_score(outcome.value)
            if score is None:
                failures["invalid"].append((i, f"returned {outcome.value!r:.200}"))
                continue
            scores[i] = score
            for key, value in extra.items():
                extras.setdefault(key, [None] * n)[i] = value
        for kind, items in failures.items():
            if not items:
                continue
            i, detail = items[0]
            message = (
                f"reward scorer {_FAILURE_WORDS[kind]} for {len(items)} of {n} sample(s); first: sample {i}, "
                f"data_source {data_sources[i]!r}: {detail}"
            )
            if self.fail_fast:
                failed = outcomes[i]
                cause = failed.value if failed is not None and failed.kind == "error" else None
                raise RewardError(message + " (reward_model.scorer_fail_fast=true)") from cause
            logger.warning("%s; these samples score 0", message)
        metrics = {metric: float(len(failures[kind])) for kind, metric in FAILURE_METRICS.items()}
        return scores, extras, metrics

    def _timeout_detail(self, outcome: Outcome) -> str:
        """Which limit a timed-out call ran into."""
        if outcome.value == "batch":
            return (
                f"not scored within the batch's {self.batch_timeout:g} s (reward_model.scorer_batch_timeout); "
                "its scorer process was killed"
            )
        return f"no result after {self.timeout:g} s (reward_model.scorer_timeout); its scorer process was killed"

    @staticmethod
    def _place(scores: list[float], valid: torch.Tensor, width: int) -> torch.Tensor:
        """``[B, R]`` zeros with each score at ``valid_len - 1`` (index 0 for an empty response)."""
        out = torch.zeros(len(scores), width, dtype=torch.float32)
        if width:
            rows = torch.arange(len(scores))
            out[rows, (valid - 1).clamp(min=0)] = torch.tensor(scores, dtype=torch.float32)
        return out

    def _examine(
        self, batch: Any, texts: list[str], data_sources: list[Any], ground_truths: list[Any], scores: list[float]
    ) -> None:
        """Print up to ``num_examine`` decoded samples per data source."""
        if self.num_examine <= 0:
            return
        shown: dict[Any, int] = {}
        for i, source in enumerate(data_sources):
            if shown.get(source, 0) >= self.num_examine:
                continue
            shown[source] = shown.get(source, 0) + 1
            lines = [f"[reward] data_source={source} sample {i}"]
            if "prompts" in batch:
                prompt = batch["prompts"][i]
                if "attention_mask" in batch:
                    prompt = prompt[batch["attention_mask"][i, : prompt.shape[0]].bool()]
                lines.append(f"[prompt] {self.tokenizer.decode(prompt.tolist(), skip_special_tokens=True)}")
            lines += [f"[response] {texts[i]}", f"[ground_truth] {ground_truths[i]}", f"[score] {scores[i]}"]
            print("\n".join(lines), flush=True)


class NaiveRewardManager(RewardManagerBase):
    """Scores one sample at a time: ``scorer(data_source=, solution_str=, ground_truth=, extra_info=)``.

    The response is decoded without special tokens up to its valid length; the float (or ``dict["score"]``,
    other keys going to ``extra_info``) lands on the last valid token. A batch that already carries
    ``rm_scores`` (scored during rollout) is returned as is.
    """

    batched = False

    def __call__(self, batch: Any) -> RewardResult:
        """Score every sample of ``batch``; see the module docstring for failure handling."""
        if "rm_scores" in batch:
            return RewardResult(batch["rm_scores"])
        responses, valid, texts, sources, truths, infos = self._inputs(batch)
        truths, truth_metrics = self._text_ground_truths(sources, truths)
        outcomes = self._score_calls(
            [
                {"data_source": sources[i], "solution_str": texts[i], "ground_truth": truths[i], "extra_info": infos[i]}
                for i in range(len(texts))
            ]
        )
        scores, extras, metrics = self._collect(outcomes, sources)
        metrics.update(truth_metrics)
        self._examine(batch, texts, sources, truths, scores)
        return RewardResult(self._place(scores, valid, responses.shape[1]), extras, metrics)


class PrimeRewardManager(NaiveRewardManager):
    """verl's ``prime`` reward manager (PRIME's verifier): each sample scored in the scorer processes, in
    parallel, with the per-sample ``reward_model.scorer_timeout`` (a sample that fails or times out scores 0,
    as in verl), plus the scores as the batch column ``acc`` (one value per sample), which PRIME's estimator
    and filters read. A batch that already carries ``rm_scores`` is returned as is."""

    def __call__(self, batch: Any) -> RewardResult:
        """Score as :class:`NaiveRewardManager` does and add ``acc``."""
        result = super().__call__(batch)
        if "rm_scores" not in batch:
            result.tensors["acc"] = result.token_level_scores.sum(dim=-1)
        return result


def _failed(outcome: Outcome | None) -> bool:
    """Whether a call failed: an error, a timeout, or a value that is not a finite score."""
    return outcome is not None and (outcome.kind != "ok" or to_score(outcome.value)[0] is None)


def _single(outcome: Outcome | None) -> Outcome | None:
    """The outcome of a batched call of one sample, as the outcome of that sample."""
    if outcome is None or outcome.kind != "ok":
        return outcome
    try:
        return Outcome("ok", _as_list(outcome.value, 1)[0])
    except TypeError as exc:
        return Outcome("error", exc)


def _as_list(value: Any, n: int) -> list[Any]:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        value = value.tolist()
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)) or len(value) != n:
        size = f" of length {len(value)}" if isinstance(value, Sequence) else ""
        raise TypeError(f"the batch scorer returned {type(value).__name__}{size}; expected a list of {n} scores")
    return list(value)


class BatchRewardManager(RewardManagerBase):
    """One scorer call per batch: ``scorer(data_sources=, solution_strs=, ground_truths=, extra_infos=,
    **reward_model.reward_kwargs)`` returning a list of floats or dicts.

    ``scorer_timeout`` bounds the whole batched call. If that call raises, times out or returns the wrong
    number of scores, the manager logs it and scores the samples one by one (batches of one, each with its
    own deadline), so a single bad sample scores 0 while the others keep their scores.
    """

    batched = True

    def _kwargs(self, sources: list, texts: list, truths: list, infos: list) -> dict[str, Any]:
        return {
            "data_sources": sources,
            "solution_strs": texts,
            "ground_truths": truths,
            "extra_infos": infos,
            **self.reward_kwargs,
        }

    def __call__(self, batch: Any) -> RewardResult:
        """Score the batch with one call, isolating samples only when that call fails."""
        if "rm_scores" in batch:
            return RewardResult(batch["rm_scores"])
        responses, valid, texts, sources, truths, infos = self._inputs(batch)
        whole = self._score_calls([self._kwargs(sources, texts, truths, infos)], fail_fast=False)[0]
        assert whole is not None  # one call, never stopped early
        if whole.kind == "ok":
            try:
                outcomes: list[Outcome | None] = [Outcome("ok", v) for v in _as_list(whole.value, len(texts))]
            except TypeError as exc:
                whole = Outcome("error", exc)
        if whole.kind != "ok":
            if isinstance(whole.value, RLCoreError):
                raise whole.value
            detail = (
                f"timed out ({self._timeout_detail(whole)})"
                if whole.kind == "timeout"
                else f"raised {type(whole.value).__name__}: {whole.value}"
            )
            if self.fail_fast:
                raise RewardError(f"batch reward scorer {detail} (reward_model.scorer_fail_fast=true)") from (
                    whole.value if whole.kind == "error" else None
                )
            logger.warning("batch reward scorer %s; scoring the %d samples one at a time", detail, len(texts))
            singles = self._score_calls(
                [self._kwargs([sources[i]], [texts[i]], [truths[i]], [infos[i]]) for i in range(len(texts))]
            )
            outcomes = [_single(outcome) for outcome in singles]
        scores, extras, metrics = self._collect(outcomes, sources)
        self._examine(batch, texts, sources, truths, scores)
        return RewardResult(self._place(scores, valid, responses.shape[1]), extras, metrics)
