"""The sampling settings every rollout engine reads from its typed ``actor_rollout_ref.rollout`` section
(:class:`~rlcore.config.sections.rollout.RolloutConfig`), and the per-request seeds of engines that seed each
request (vLLM, SGLang).

The HF engine's sampling step is ``rlcore_plugin_hf.sampler.sample_next_tokens``; vLLM and SGLang map
:class:`SamplingParams` onto their own sampling parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from rlcore.config.ranges import SAMPLING_RANGES, range_problems
from rlcore.errors import RLCoreError

if TYPE_CHECKING:
    from rlcore.config.sections.rollout import RolloutConfig, ValKwargs

__all__ = ["RolloutSettings", "SamplingParams", "request_seeds"]


@dataclass(frozen=True)
class SamplingParams:
    """How to pick the next token: ``temperature`` ≥ 0, ``top_k`` (≤ 0 = off), ``top_p`` in (0, 1]."""

    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    do_sample: bool = True

    @property
    def greedy(self) -> bool:
        """True when the argmax is taken: sampling is off or the temperature is 0."""
        return not self.do_sample or self.temperature == 0

    @property
    def logprob_temperature(self) -> float:
        """The temperature the reported log-probs are computed at (1 for a zero temperature)."""
        return self.temperature if self.temperature > 0 else 1.0

    @classmethod
    def from_config(cls, section: RolloutConfig | ValKwargs) -> SamplingParams:
        """Check and take ``temperature``, ``top_k`` (null: -1), ``top_p`` and ``do_sample`` of a typed rollout
        section or its ``val_kwargs``; an invalid value raises an :class:`~rlcore.errors.RLCoreError` naming its
        key."""
        values = {name: getattr(section, name) for name in SAMPLING_RANGES}
        problems = range_problems(values, section.PATH, SAMPLING_RANGES)
        if problems:
            raise RLCoreError("; ".join(problems))
        temperature = _number(section.temperature, section.key("temperature"))
        top_p = _number(section.top_p, section.key("top_p"))
        top_k = -1 if section.top_k is None else section.top_k
        if not isinstance(section.do_sample, bool):
            raise RLCoreError(f"{section.key('do_sample')} must be true or false, got {section.do_sample!r}")
        return cls(temperature=temperature, top_k=top_k, top_p=top_p, do_sample=section.do_sample)


class RolloutSettings:
    """The sampling settings of a typed ``actor_rollout_ref.rollout`` section, checked: ``response_length``,
    ``train`` and ``val`` (:class:`SamplingParams` of the section and of its ``val_kwargs``),
    ``calculate_log_probs``, ``ignore_eos`` and ``seed``."""

    def __init__(self, config: RolloutConfig) -> None:
        self.response_length: int = config.response_length
        self.train = SamplingParams.from_config(config)
        self.val = SamplingParams.from_config(config.val_kwargs)
        self.calculate_log_probs = bool(config.calculate_log_probs)
        self.ignore_eos = bool(config.ignore_eos)
        self.seed = int(config.seed)

    def params_for(self, batch: Any, validate: bool) -> SamplingParams:
        """The sampling for ``batch``: ``val`` when ``validate`` or ``batch.meta["validate"]`` is true, else
        ``train``; greedy either way when ``batch.meta["do_sample"]`` is False (ReMax's baseline)."""
        params = self.val if validate or bool(batch.meta.get("validate", False)) else self.train
        if batch.meta.get("do_sample") is False:
            params = replace(params, do_sample=False)
        return params


def _number(value: Any, key: str) -> float:
    """``value`` as a finite float, or an RLCoreError naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RLCoreError(f"{key} must be a finite number, got {value!r}")
    return float(value)


def request_seeds(seed: int, call_index: int, count: int) -> list[int]:
    """``count`` per-request sampling seeds in ``[0, 2**63)`` for the ``call_index``-th generate call of an
    engine seeded ``seed`` (for engines that seed each request, such as vLLM and SGLang).

    Every request gets its own seed (identical prompts repeated ``rollout.n`` times must not draw the same
    sample), and the seeds depend only on ``(seed, call_index, row)``: a run is reproducible whatever the
    engine's internal batching, and a resumed run that restores ``call_index`` continues the same stream.
    """
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(call_index)]).generate_state(count, dtype=np.uint64)
    return [int(value >> np.uint64(1)) for value in state]
