"""Learning-rate schedule (warm-up, constant, cosine) and optimizer settings."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from rlcore.config.sections.actor import OptimConfig
from rlcore.errors import RLCoreError
from rlcore.modelkit.optim import build_lr_scheduler, build_optimizer

KEY = "actor_rollout_ref.actor.optim"


def _rates(optim: dict, steps: int) -> list[float]:
    """The learning rates a scheduler built from ``optim`` yields for ``steps`` consecutive steps."""
    config = OptimConfig.from_mapping(OmegaConf.create({"lr": 1.0, "weight_decay": 0.0, **optim}))
    optimizer = build_optimizer([torch.nn.Parameter(torch.zeros(1))], config, KEY)
    scheduler = build_lr_scheduler(optimizer, config, KEY)
    rates = []
    for _ in range(steps):
        rates.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return rates


def test_constant_with_warmup() -> None:
    """Linear warm-up from 0 over ``lr_warmup_steps``, then constant."""
    assert _rates({"lr_warmup_steps": 2, "lr_scheduler_type": "constant"}, 4) == pytest.approx([0.0, 0.5, 1.0, 1.0])


def test_no_warmup_starts_at_full_rate() -> None:
    """Zero warm-up steps (the default ratio 0) gives the full rate from the first update."""
    assert _rates({"lr_warmup_steps": -1, "lr_warmup_steps_ratio": 0.0}, 2) == pytest.approx([1.0, 1.0])


def test_cosine_with_warmup_ratio_and_floor() -> None:
    """Warm-up from the ratio × total steps, then a half cosine down to ``min_lr_ratio``."""
    rates = _rates(
        {
            "lr_warmup_steps": -1,
            "lr_warmup_steps_ratio": 0.2,
            "total_training_steps": 10,
            "lr_scheduler_type": "cosine",
            "min_lr_ratio": 0.1,
            "num_cycles": 0.5,
        },
        11,
    )
    assert rates[:3] == pytest.approx([0.0, 0.5, 1.0])
    assert rates[6] == pytest.approx(0.1 + 0.9 * 0.5)
    assert rates[10] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(rates[2:], rates[3:]))


def test_deprecated_warmup_style_wins() -> None:
    """``warmup_style`` (deprecated) overrides ``lr_scheduler_type`` and warns."""
    with pytest.warns(DeprecationWarning, match="warmup_style"):
        rates = _rates({"lr_scheduler_type": "constant", "warmup_style": "cosine", "total_training_steps": 4}, 5)
    assert rates[-1] == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("optim", "message"),
    [
        ({"lr_scheduler_type": "cosine"}, f"{KEY}.total_training_steps"),
        ({"lr_scheduler_type": "linear"}, f"{KEY}.lr_scheduler_type"),
        ({"lr_warmup_steps_ratio": 0.1}, f"{KEY}.total_training_steps"),
        ({"min_lr_ratio": 2.0}, f"{KEY}.min_lr_ratio"),
        ({"betas": [0.9]}, f"{KEY}.betas"),
        ({"lr": "fast"}, f"{KEY}.lr"),
    ],
)
def test_errors_name_the_key(optim: dict, message: str) -> None:
    """Invalid optimizer or schedule settings raise an RLCoreError naming the key."""
    with pytest.raises(RLCoreError, match=message.replace(".", r"\.")):
        _rates(optim, 1)
