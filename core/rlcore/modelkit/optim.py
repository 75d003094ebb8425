"""AdamW and the learning-rate schedule (linear warm-up, then constant or cosine), with verl's semantics.

The schedule is a ``LambdaLR`` stepped once per ``update_actor``/``update_critic`` call. Its factor at
step ``s`` with ``w`` warm-up steps and ``T`` total steps is ``s / w`` while ``s < w``; afterwards 1
(``constant``) or ``max(0, m + (1 − m)·½·(1 + cos(2π·c·p)))`` with ``p = (s − w)/(T − w)`` (``cosine``,
``m = min_lr_ratio``, ``c = num_cycles``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR

from rlcore.config.algorithm_names import scheduler_type
from rlcore.config.ranges import OPTIM_RANGES, range_problems
from rlcore.config.sections.actor import OptimConfig
from rlcore.errors import RLCoreError
from rlcore.modelkit.megatron_schedule import MegatronLRScheduler, megatron_schedule, uses_megatron_schedule


def lr_factor(
    step: int, *, warmup_steps: int, total_steps: int, scheduler_type: str, min_lr_ratio: float, num_cycles: float
) -> float:
    """The multiplier of the base learning rate after ``step`` scheduler steps (see the module docstring)."""
    if step < warmup_steps:
        return step / warmup_steps
    if scheduler_type == "constant":
        return 1.0
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(2.0 * math.pi * num_cycles * progress))
    return max(0.0, min_lr_ratio + (1.0 - min_lr_ratio) * cosine)


def _number(optim: OptimConfig, name: str, key: str) -> float:
    """A numeric optimizer setting; errors name ``key.name``."""
    value = getattr(optim, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RLCoreError(f"{key}.{name} must be a number, got {value!r}")
    return float(value)


def check_optim_ranges(optim: OptimConfig, key: str) -> None:
    """Raise one :class:`RLCoreError` naming every value of the section at ``key`` outside its range
    (:data:`rlcore.config.ranges.OPTIM_RANGES`: ``lr``, ``weight_decay``, ``betas``, the schedule's values)."""
    problems = range_problems(optim.tree(), key, OPTIM_RANGES)
    if problems:
        raise RLCoreError("; ".join(problems))


def build_optimizer(params: Iterable[torch.nn.Parameter], optim: OptimConfig, key: str) -> torch.optim.AdamW:
    """AdamW over ``params`` with ``lr``, ``weight_decay`` and ``betas`` of the section at ``key``; every value
    of the section outside its range (:data:`rlcore.config.ranges.OPTIM_RANGES`) is named in one error."""
    check_optim_ranges(optim, key)
    lr = _number(optim, "lr", key)
    weight_decay = _number(optim, "weight_decay", key)
    betas = list(optim.betas)
    params = list(params)
    # the fused kernel (CPU and CUDA) handles plain tensors only; DTensor (FSDP2) parameters take the
    # multi-tensor path, which torch's default picks on CUDA but not on CPU (single-tensor there)
    from torch.distributed.tensor import DTensor

    plain = all(not isinstance(p, DTensor) and p.device.type in ("cpu", "cuda") for p in params)
    kernel = {"fused": True} if plain else {"foreach": True}
    return torch.optim.AdamW(
        params, lr=lr, weight_decay=weight_decay, betas=(float(betas[0]), float(betas[1])), **kernel
    )


def build_lr_scheduler(optimizer: torch.optim.Optimizer, optim: OptimConfig, key: str) -> LambdaLR:
    """The warm-up + constant/cosine ``LambdaLR`` described in the module docstring, or verl's Megatron
    schedule (:mod:`rlcore.modelkit.megatron_schedule`) when the section sets one of its keys.

    Warm-up steps are ``lr_warmup_steps`` when it is ≥ 0, else ``int(lr_warmup_steps_ratio ×
    total_training_steps)``. A cosine schedule, or a warm-up ratio, needs ``total_training_steps`` > 0.
    """
    check_optim_ranges(optim, key)
    if uses_megatron_schedule(optim):
        return MegatronLRScheduler(optimizer, megatron_schedule(optim, key), optim.use_checkpoint_opt_param_scheduler)
    kind = scheduler_type(optim.lr_scheduler_type, optim.warmup_style, key)
    total = int(_number(optim, "total_training_steps", key))
    warmup = int(_number(optim, "lr_warmup_steps", key))
    ratio = _number(optim, "lr_warmup_steps_ratio", key)
    min_lr_ratio = _number(optim, "min_lr_ratio", key)
    num_cycles = _number(optim, "num_cycles", key)
    if warmup < 0:
        if ratio and total <= 0:
            raise RLCoreError(
                f"{key}.lr_warmup_steps_ratio={ratio} needs {key}.total_training_steps > 0 "
                f"(got {total}); set it or use {key}.lr_warmup_steps"
            )
        warmup = int(ratio * max(total, 0))
    if kind == "cosine" and total <= 0:
        raise RLCoreError(f"{key}.lr_scheduler_type=cosine needs {key}.total_training_steps > 0, got {total}")
    return LambdaLR(
        optimizer,
        partial(
            lr_factor,
            warmup_steps=warmup,
            total_steps=total,
            scheduler_type=kind,
            min_lr_ratio=min_lr_ratio,
            num_cycles=num_cycles,
        ),
    )


class OptimizerState:
    """The optimizer and LR-schedule bookkeeping of a :class:`~rlcore.api.training.TrainingEngine` that
    trains with a torch optimizer and the schedule of :func:`build_lr_scheduler`: a mixin giving the
    contract's ``lr_scheduler_step``, ``has_optimizer_state``, ``reset_optimizer_state``, ``state_dict`` and
    ``load_state_dict``. The engine sets :attr:`role`, :attr:`optimizer` and :attr:`lr_scheduler` (both
    None for a frozen reference model)."""

    role: str
    optimizer: torch.optim.Optimizer | None
    lr_scheduler: LambdaLR | None

    def _trainable(self, method: str) -> torch.optim.Optimizer:
        """The optimizer; a frozen engine has none, which ``method`` needs."""
        if self.optimizer is None:
            raise RLCoreError(f"{method}() on the {self.role} engine, which is not trained")
        return self.optimizer

    def lr_scheduler_step(self) -> float:
        """Step the LR schedule once; the rate the update used. torch's "scheduler before optimizer" warning
        is expected (and hidden) when every optimizer step of the update was skipped."""
        self._trainable("lr_scheduler_step")
        assert self.lr_scheduler is not None  # built together with the optimizer
        rate = float(self.lr_scheduler.get_last_lr()[0])
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before")
            self.lr_scheduler.step()
        return rate

    def has_optimizer_state(self) -> bool:
        """Whether the optimizer has taken a step (and so has moments to save)."""
        return self.optimizer is not None and bool(self.optimizer.state)

    def reset_optimizer_state(self) -> None:
        """Forget the optimizer's moments and step counts."""
        if self.optimizer is not None:
            self.optimizer.state.clear()

    def state_dict(self) -> dict[str, Any]:
        """The LR schedule's state (empty for a frozen engine)."""
        return {"lr_scheduler": self.lr_scheduler.state_dict()} if self.lr_scheduler is not None else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the LR schedule."""
        if self.lr_scheduler is not None and "lr_scheduler" in state:
            self.lr_scheduler.load_state_dict(state["lr_scheduler"])
