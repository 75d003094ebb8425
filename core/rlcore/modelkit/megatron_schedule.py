"""verl's Megatron learning-rate schedule (megatron-core's ``OptimizerParamScheduler``) as a torch scheduler.

verl's Megatron optimizers decay the rate with ``lr_decay_style`` between ``lr`` and ``min_lr`` after a
linear warm-up from ``lr_warmup_init``. After ``n`` scheduler steps, with ``w`` warm-up steps, ``D`` decay
steps and ``r = (n − w)/(D − w)``, the rate is:

- ``n ≤ w`` (and ``w > 0``): ``init + (lr − init)·n/w``;
- ``constant``: ``lr``; every other style gives ``min_lr`` once ``n > D``;
- ``inverse-square-root``: ``max(min_lr, lr·√max(w, 1)/√max(n, 1))``;
- ``linear``: ``min_lr + (lr − min_lr)·(1 − r)``; ``cosine``: ``… ·½(1 + cos πr)``;
- ``WSD``: ``lr`` until ``D − S`` (``S = lr_wsd_decay_steps``), then annealed over ``S`` steps with
  ``lr_wsd_decay_style`` (``linear``, ``cosine``, ``exponential`` ``2·0.5^q − 1``, ``minus_sqrt`` ``1 − √q``).

``D`` is ``lr_decay_steps`` (null: ``total_training_steps``); ``w`` is ``lr_warmup_steps`` when it is > 0,
else ``int(lr_warmup_steps_ratio·D)``, as verl computes it for Megatron. The weight decay stays
``weight_decay``: verl gives Megatron's weight-decay increment the same start and end value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR

from rlcore.config.sections.actor import OptimConfig
from rlcore.errors import RLCoreError

#: megatron-core's ``lr_decay_style`` values
DECAY_STYLES: tuple[str, ...] = ("constant", "linear", "cosine", "inverse-square-root", "WSD")
#: megatron-core's ``lr_wsd_decay_style`` values
WSD_DECAY_STYLES: tuple[str, ...] = ("linear", "cosine", "exponential", "minus_sqrt")
#: megatron-core's ``wd_incr_style`` values
WD_INCR_STYLES: tuple[str, ...] = ("constant", "linear", "cosine")
#: the optimizer keys that ask for this schedule (any of them set, other than null)
MEGATRON_SCHEDULE_KEYS: tuple[str, ...] = (
    "lr_decay_style",
    "min_lr",
    "lr_warmup_init",
    "lr_decay_steps",
    "weight_decay_incr_style",
    "lr_wsd_decay_style",
    "lr_wsd_decay_steps",
)


def uses_megatron_schedule(optim: OptimConfig) -> bool:
    """Whether the optimizer section sets one of :data:`MEGATRON_SCHEDULE_KEYS` or
    ``use_checkpoint_opt_param_scheduler`` (verl's Megatron optimizers always run this schedule)."""
    return optim.use_checkpoint_opt_param_scheduler or any(
        getattr(optim, name) is not None for name in MEGATRON_SCHEDULE_KEYS
    )


@dataclass
class MegatronSchedule:
    """The schedule's values and its rate after a number of steps (the module docstring's formula)."""

    max_lr: float
    min_lr: float
    init_lr: float
    warmup_steps: int
    decay_steps: int
    decay_style: str
    wsd_decay_steps: int | None
    wsd_decay_style: str

    def rate(self, step: int) -> float:
        """The learning rate after ``step`` scheduler steps."""
        if self.warmup_steps > 0 and step <= self.warmup_steps:
            return self.init_lr + (self.max_lr - self.init_lr) * step / self.warmup_steps
        if self.decay_style == "constant":
            return self.max_lr
        if step > self.decay_steps:
            return self.min_lr
        if self.decay_style == "inverse-square-root":
            return max(self.min_lr, self.max_lr * math.sqrt(max(self.warmup_steps, 1)) / math.sqrt(max(step, 1)))
        ratio = (step - self.warmup_steps) / (self.decay_steps - self.warmup_steps)
        if self.decay_style == "linear":
            coeff = 1.0 - ratio
        elif self.decay_style == "cosine":
            coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
        else:
            coeff = self._wsd_coeff(step)
        return self.min_lr + coeff * (self.max_lr - self.min_lr)

    def _wsd_coeff(self, step: int) -> float:
        assert self.wsd_decay_steps is not None  # checked when built
        anneal_start = self.decay_steps - self.wsd_decay_steps
        if step <= anneal_start:
            return 1.0
        q = (step - anneal_start) / self.wsd_decay_steps
        if self.wsd_decay_style == "linear":
            return 1.0 - q
        if self.wsd_decay_style == "cosine":
            return 0.5 * (math.cos(math.pi * q) + 1.0)
        if self.wsd_decay_style == "exponential":
            return 2.0 * math.pow(0.5, q) - 1.0
        return 1.0 - math.sqrt(q)

    def __call__(self, step: int) -> float:
        """The multiplier of ``max_lr`` after ``step`` steps (what ``LambdaLR`` asks)."""
        return self.rate(step) / self.max_lr if self.max_lr > 0 else 0.0


class MegatronLRScheduler(LambdaLR):
    """``LambdaLR`` over a :class:`MegatronSchedule`, whose resume follows ``use_checkpoint_opt_param_scheduler``:
    true restores the checkpoint's schedule values, false keeps this run's (as verl's override); the step
    count always comes from the checkpoint."""

    def __init__(self, optimizer: torch.optim.Optimizer, schedule: MegatronSchedule, use_checkpoint: bool) -> None:
        self.schedule = schedule
        self.use_checkpoint = use_checkpoint
        super().__init__(optimizer, schedule)

    def state_dict(self) -> dict[str, Any]:
        """The step count, rates and the schedule's values (``megatron_schedule``)."""
        state = {k: v for k, v in super().state_dict().items() if k not in ("schedule", "use_checkpoint")}
        state["lr_lambdas"] = [None] * len(self.lr_lambdas)
        state["megatron_schedule"] = asdict(self.schedule)
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore the step count; the schedule's values too with ``use_checkpoint``."""
        state = {k: v for k, v in state_dict.items() if k not in ("megatron_schedule", "schedule", "use_checkpoint")}
        state["lr_lambdas"] = [None] * len(self.lr_lambdas)
        saved = state_dict.get("megatron_schedule")
        if self.use_checkpoint and saved is not None:
            self.schedule.__dict__.update(saved)
        elif "base_lrs" in state:
            state["base_lrs"] = list(self.base_lrs)
        super().load_state_dict(state)
        self._last_lr = [base * self.schedule(self.last_epoch) for base in self.base_lrs]
        for group, rate in zip(self.optimizer.param_groups, self._last_lr):
            group["lr"] = rate


def _choice(value: str | None, default: str, allowed: tuple[str, ...], key: str) -> str:
    chosen = default if value is None else value
    if chosen not in allowed:
        raise RLCoreError(f"{key}={chosen!r} is not one of Megatron's: {', '.join(allowed)}")
    return chosen


def megatron_schedule(optim: OptimConfig, key: str) -> MegatronSchedule:
    """The schedule of the optimizer section at ``key`` (verl's Megatron defaults for unset keys); an
    inconsistent one (no decay steps, warm-up not shorter than the decay, ``min_lr`` above ``lr``) is an
    error naming the keys."""
    style = _choice(optim.lr_decay_style, "linear", DECAY_STYLES, f"{key}.lr_decay_style")
    wsd_style = _choice(optim.lr_wsd_decay_style, "exponential", WSD_DECAY_STYLES, f"{key}.lr_wsd_decay_style")
    _choice(optim.weight_decay_incr_style, "constant", WD_INCR_STYLES, f"{key}.weight_decay_incr_style")
    decay_steps = optim.total_training_steps if optim.lr_decay_steps is None else optim.lr_decay_steps
    if decay_steps <= 0:
        raise RLCoreError(
            f"{key}.lr_decay_style={style} needs {key}.lr_decay_steps or {key}.total_training_steps > 0, "
            f"got {decay_steps}"
        )
    warmup = optim.lr_warmup_steps
    if warmup <= 0:
        warmup = int(optim.lr_warmup_steps_ratio * decay_steps)
    if warmup >= decay_steps:
        raise RLCoreError(f"{key}: the {warmup} warm-up steps must be fewer than the {decay_steps} decay steps")
    max_lr = float(optim.lr)
    min_lr = float(optim.min_lr or 0.0)
    init_lr = float(optim.lr_warmup_init or 0.0)
    if min_lr > max_lr or init_lr > max_lr:
        raise RLCoreError(f"{key}.min_lr={min_lr:g} and {key}.lr_warmup_init={init_lr:g} must not exceed lr={max_lr:g}")
    if style == "WSD" and optim.lr_wsd_decay_steps is None:
        raise RLCoreError(f"{key}.lr_decay_style=WSD needs {key}.lr_wsd_decay_steps")
    return MegatronSchedule(
        max_lr=max_lr,
        min_lr=min_lr,
        init_lr=init_lr,
        warmup_steps=warmup,
        decay_steps=decay_steps,
        decay_style=style,
        wsd_decay_steps=optim.lr_wsd_decay_steps,
        wsd_decay_style=wsd_style,
    )
