"""The ranges of numeric config values, in one table read by the dry run and by the code that uses them.

:data:`OPTIM_RANGES` and :data:`SAMPLING_RANGES` hold the keys of a section (an optimizer's ``optim``, a
rollout's sampling settings) relative to it: the optimizer builder (:mod:`rlcore.modelkit.optim`) and the
sampling parameters (:mod:`rlcore.rollout.sampling`) check their section with them when they are built, and the
dry run checks every such section of the run config before anything starts (:func:`value_range_problems`),
together with the single keys of :data:`KEY_RANGES`. A value outside its range, a NaN or an infinity is one
problem naming the key, the range and the value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

_MISSING = object()


@dataclass(frozen=True)
class Range:
    """The values a numeric key accepts.

    Attributes:
        low, high: the bounds (``None``: unbounded on that side).
        low_open, high_open: the bound itself is excluded.
        integer: only integers (otherwise ints and floats).
        nullable: ``null`` is accepted (it has a meaning: a default, "off").
        items: the value is a list of exactly this many numbers, each in the range (``betas``).
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    nullable: bool = False
    items: int | None = None

    def describe(self) -> str:
        """``a number in [0, 1)``, ``an integer >= 1``, ``2 numbers in [0, 1)``, ``... or null``."""
        if self.items is not None:
            what = f"{self.items} {'integers' if self.integer else 'numbers'}"
        else:
            what = "an integer" if self.integer else "a number"
        if self.low is not None and self.high is not None:
            bounds = f" in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}{')' if self.high_open else ']'}"
        elif self.low is not None:
            bounds = f" {'>' if self.low_open else '>='} {_num(self.low)}"
        elif self.high is not None:
            bounds = f" {'<' if self.high_open else '<='} {_num(self.high)}"
        else:
            bounds = ""
        return what + bounds + (" or null" if self.nullable else "")

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` is in the range."""
        if value is None:
            return self.nullable
        if self.items is not None:
            if not isinstance(value, (list, tuple)) and not OmegaConf.is_list(value):
                return False
            return len(value) == self.items and all(self._number_ok(v) for v in value)
        return self._number_ok(value)

    def _number_ok(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        if self.integer and isinstance(value, float):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)


def _num(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


#: an optimizer section (``actor_rollout_ref.actor.optim``, ``critic.optim``, SFT's ``optim``)
OPTIM_RANGES: dict[str, Range] = {
    "lr": Range(low=0),
    "weight_decay": Range(low=0),
    "betas": Range(low=0, high=1, high_open=True, items=2),
    "lr_warmup_steps": Range(low=-1, integer=True),
    "lr_warmup_steps_ratio": Range(low=0, high=1),
    "min_lr_ratio": Range(low=0, high=1),
    "num_cycles": Range(low=0),
    "min_lr": Range(low=0, nullable=True),
    "lr_warmup_init": Range(low=0, nullable=True),
    "lr_decay_steps": Range(low=1, integer=True, nullable=True),
    "lr_wsd_decay_steps": Range(low=1, integer=True, nullable=True),
}
#: a rollout's sampling settings (``actor_rollout_ref.rollout`` and its ``val_kwargs``); a training rollout
#: needs more (a temperature > 0: :func:`rlcore.config.validate.sampling_problems`)
SAMPLING_RANGES: dict[str, Range] = {
    "temperature": Range(low=0),
    "top_p": Range(low=0, high=1, low_open=True),
    "top_k": Range(integer=True, nullable=True),
}
#: the sections checked with the tables above
OPTIM_SECTIONS: tuple[str, ...] = ("actor_rollout_ref.actor.optim", "critic.optim")
SAMPLING_SECTIONS: tuple[str, ...] = ("actor_rollout_ref.rollout", "actor_rollout_ref.rollout.val_kwargs")
#: single keys (counts that must be positive are in :mod:`rlcore.config.schema`)
KEY_RANGES: dict[str, Range] = {
    "actor_rollout_ref.actor.clip_ratio": Range(low=0),
    "actor_rollout_ref.actor.clip_ratio_low": Range(low=0, nullable=True),
    "actor_rollout_ref.actor.clip_ratio_high": Range(low=0, nullable=True),
    "actor_rollout_ref.actor.clip_ratio_c": Range(low=1, low_open=True),
    "actor_rollout_ref.actor.entropy_coeff": Range(),
    "actor_rollout_ref.actor.kl_loss_coef": Range(low=0),
    "actor_rollout_ref.actor.loss_scale_factor": Range(low=0, low_open=True, nullable=True),
    "actor_rollout_ref.actor.entropy_from_logits_chunk_size": Range(low=1, integer=True),
    "actor_rollout_ref.ref.entropy_from_logits_chunk_size": Range(low=1, integer=True),
    "actor_rollout_ref.actor.policy_loss.clip_cov_ratio": Range(low=0, high=1),
    "actor_rollout_ref.actor.policy_loss.kl_cov_ratio": Range(low=0, high=1),
    "actor_rollout_ref.actor.policy_loss.ppo_kl_coef": Range(low=0),
    "actor_rollout_ref.rollout.gpu_memory_utilization": Range(low=0, high=1, low_open=True),
    "critic.cliprange_value": Range(low=0),
    "critic.loss_scale_factor": Range(low=0, low_open=True, nullable=True),
    "critic.ppo_epochs": Range(low=1, integer=True),
    "algorithm.gamma": Range(low=0, high=1),
    "algorithm.lam": Range(low=0, high=1),
    "algorithm.kl_ctrl.kl_coef": Range(low=0),
    "reward_model.judge.max_score": Range(low=0, low_open=True),
}


def _problem(key: str, value: Any, allowed: Range) -> list[str]:
    """``["KEY must be RANGE, got VALUE"]`` when ``value`` is out of ``allowed``, else ``[]``."""
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)
    return [] if allowed.accepts(value) else [f"{key} must be {allowed.describe()}, got {value!r}"]


def range_problems(section: Any, prefix: str, ranges: Mapping[str, Range]) -> list[str]:
    """One line per key of ``ranges`` whose value in ``section`` (a mapping at the dotted ``prefix``) is out of
    its range; keys the section does not have are skipped."""
    problems = []
    for name, allowed in ranges.items():
        value = section.get(name, _MISSING) if section is not None else _MISSING
        if value is not _MISSING:
            problems += _problem(f"{prefix}.{name}", value, allowed)
    return problems


def value_range_problems(config: Any) -> list[str]:
    """Every value of the run config outside its range: :data:`KEY_RANGES` and the optimizer and sampling
    sections."""
    problems = []
    for section in OPTIM_SECTIONS:
        problems += range_problems(OmegaConf.select(config, section), section, OPTIM_RANGES)
    for section in SAMPLING_SECTIONS:
        problems += range_problems(OmegaConf.select(config, section), section, SAMPLING_RANGES)
    for key, allowed in KEY_RANGES.items():
        value = OmegaConf.select(config, key, default=_MISSING)
        if value is not _MISSING:
            problems += _problem(key, value, allowed)
    return problems
