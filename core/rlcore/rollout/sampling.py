"""Sampling parameters read from the ``actor_rollout_ref.rollout`` config, and one batched sampling step.

The step works on float32 logits ``[B, V]``: temperature scaling, then top-k and top-p filtering, then a
draw with the Gumbel-max trick (``argmax(logits / T + G)`` with ``G = -log(-log U)``, which equals the
exponential race ``argmax(p / E)`` with ``E = -log U ~ Exp(1)``: the same distribution as ``multinomial``,
without a softmax and several times faster for small batches), from a caller-owned ``torch.Generator`` or
caller-drawn Gumbel noise, so a run is reproducible from its seed. Greedy decoding takes the argmax of
the raw logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from rlcore.config.ranges import SAMPLING_RANGES, range_problems
from rlcore.errors import RLCoreError

__all__ = ["RolloutSettings", "SamplingParams", "request_seeds", "sample_next_tokens"]

#: the rollout section of the config
ROLLOUT_KEY = "actor_rollout_ref.rollout"


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
    def from_config(cls, section: Any, prefix: str = ROLLOUT_KEY) -> SamplingParams:
        """Read and check ``temperature``, ``top_k``, ``top_p`` and ``do_sample`` from a config section.

        ``prefix`` is the dotted path of ``section``, used to name the key at fault in the
        :class:`~rlcore.errors.RLCoreError` raised for an invalid value.
        """
        problems = range_problems(section, prefix, SAMPLING_RANGES)
        if problems:
            raise RLCoreError("; ".join(problems))
        temperature = _number(section.get("temperature", 1.0), f"{prefix}.temperature")
        top_p = _number(section.get("top_p", 1.0), f"{prefix}.top_p")
        top_k = section.get("top_k", -1)
        if top_k is None:
            top_k = -1
        do_sample = section.get("do_sample", True)
        if not isinstance(do_sample, bool):
            raise RLCoreError(f"{prefix}.do_sample must be true or false, got {do_sample!r}")
        return cls(temperature=temperature, top_k=top_k, top_p=top_p, do_sample=do_sample)


class RolloutSettings:
    """The sampling settings every engine reads from the ``actor_rollout_ref.rollout`` section, checked.

    ``response_length`` (a positive integer), ``train`` and ``val`` (:class:`SamplingParams` of the
    section and of its ``val_kwargs``), ``calculate_log_probs``, ``ignore_eos`` and ``seed``.
    """

    def __init__(self, config: Any) -> None:
        length = config.get("response_length", 512)
        if isinstance(length, bool) or not isinstance(length, int) or length <= 0:
            raise RLCoreError(f"{ROLLOUT_KEY}.response_length must be a positive integer, got {length!r}")
        self.response_length: int = length
        self.train = SamplingParams.from_config(config)
        self.val = SamplingParams.from_config(config.get("val_kwargs") or {}, f"{ROLLOUT_KEY}.val_kwargs")
        self.calculate_log_probs = bool(config.get("calculate_log_probs", False))
        self.ignore_eos = bool(config.get("ignore_eos", False))
        self.seed = int(config.get("seed", 0) or 0)

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


def _dropped(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor | None:
    """The entries of ``scaled [B, V]`` outside the top-k set (ties with the k-th value kept) or outside
    the top-p nucleus of what top-k keeps, as a boolean mask; None when neither filter is on. ``scaled``
    is not written."""
    vocab = scaled.shape[-1]
    drop = None
    if 0 < top_k < vocab:
        kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
        drop = scaled < kth
    if top_p < 1.0:
        kept = scaled if drop is None else scaled.masked_fill(drop, float("-inf"))
        sorted_logits, order = torch.sort(kept, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = sorted_probs.cumsum(dim=-1).sub_(sorted_probs)
        outside = torch.zeros_like(scaled, dtype=torch.bool).scatter_(-1, order, mass_before >= top_p)
        drop = outside if drop is None else drop.logical_or_(outside)
    return drop


def sample_next_tokens(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
    with_logprobs: bool = False,
    gumbel: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Pick one token per row of ``logits [B, V]``; returns ``(tokens [B], logprobs [B] or None)``.

    A sampled token is ``argmax(filtered logits / T + G)``; ``gumbel`` holds the Gumbel draws ``G [B, V]``
    when the caller draws them (per-row generators: :class:`rlcore.rollout.row_noise.RowNoise`; the
    tensor is overwritten with the scores), else they are drawn from ``generator``. The passes over the
    vocabulary: the scaling by ``1 / T`` (none at ``T = 1``), the noise, one in-place sum with it, the
    filters' masks written into the sum (top-k: its selection and one comparison; top-p: a sort), the
    argmax, and the log-softmax for the log-probs.

    The log-prob of a token is taken from ``log_softmax(logits / T)`` with ``T =
    params.logprob_temperature``, before top-k/top-p filtering: the quantity a trainer recomputes with
    a teacher-forced forward pass at the same temperature.
    """
    logits = logits.float()
    if params.greedy:
        tokens = logits.argmax(dim=-1)
        temperature = params.logprob_temperature
        scaled = logits / temperature if with_logprobs and temperature != 1 else logits
    else:
        scaled = logits if params.temperature == 1 else logits / params.temperature
        drop = _dropped(scaled, params.top_k, params.top_p)
        if gumbel is None:
            uniform = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=torch.float32)
            gumbel = uniform.log_().neg_().log_().neg_()
        scores = gumbel.add_(scaled)  # G + s == s + G exactly: the sum the filtered logits would give
        if drop is not None:
            scores.masked_fill_(drop, float("-inf"))
        tokens = scores.argmax(dim=-1)
    if not with_logprobs:
        return tokens, None
    logprobs = torch.log_softmax(scaled, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
    return tokens, logprobs


def request_seeds(seed: int, call_index: int, count: int) -> list[int]:
    """``count`` per-request sampling seeds in ``[0, 2**63)`` for the ``call_index``-th generate call of an
    engine seeded ``seed`` (for engines that seed each request, such as vLLM and SGLang).

    Every request gets its own seed (identical prompts repeated ``rollout.n`` times must not draw the same
    sample), and the seeds depend only on ``(seed, call_index, row)``: a run is reproducible whatever the
    engine's internal batching, and a resumed run that restores ``call_index`` continues the same stream.
    """
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(call_index)]).generate_state(count, dtype=np.uint64)
    return [int(value >> np.uint64(1)) for value in state]
