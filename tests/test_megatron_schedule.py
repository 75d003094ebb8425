"""verl's Megatron learning-rate schedule (``optim.lr_decay_style``, ``min_lr``, ...): hand-computed rates,
megatron-core's own ``OptimizerParamScheduler`` and the resume rule of ``use_checkpoint_opt_param_scheduler``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.config.sections.actor import OptimConfig
from rlcore.errors import RLCoreError
from rlcore.modelkit.optim import build_lr_scheduler, build_optimizer
from rlcore.tracking.sinks import read_metrics

KEY = "actor_rollout_ref.actor.optim"


def _build(optim: dict[str, Any]) -> tuple[torch.optim.Optimizer, Any]:
    config = OptimConfig.from_mapping(OmegaConf.create({"lr": 1e-3, "weight_decay": 0.0, **optim}))
    optimizer = build_optimizer([torch.nn.Parameter(torch.zeros(1))], config, KEY)
    return optimizer, build_lr_scheduler(optimizer, config, KEY)


def _rates(optim: dict[str, Any], steps: int) -> list[float]:
    """The rate each of ``steps`` updates uses (read before the step, as the engines do)."""
    optimizer, scheduler = _build(optim)
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def test_linear_warmup_from_init_then_linear_decay_by_hand() -> None:
    """Warm-up from lr_warmup_init over 2 steps, then linear to min_lr at lr_decay_steps=6, then min_lr."""
    rates = _rates({"lr_warmup_steps": 2, "lr_warmup_init": 1e-4, "min_lr": 1e-5, "lr_decay_steps": 6}, 9)
    hand = [1e-4, 1e-4 + 9e-4 / 2, 1e-3]
    hand += [1e-5 + (1e-3 - 1e-5) * (1 - (n - 2) / 4) for n in (3, 4, 5, 6)]
    hand += [1e-5, 1e-5]
    assert rates == pytest.approx(hand, rel=1e-6)


def test_cosine_decays_over_total_training_steps_by_default() -> None:
    """No lr_decay_steps: the decay ends at total_training_steps; the warm-up ratio is of the decay steps."""
    rates = _rates(
        {"lr_decay_style": "cosine", "min_lr": 1e-4, "total_training_steps": 10, "lr_warmup_steps_ratio": 0.2}, 11
    )
    cos = [1e-4 + 0.5 * (math.cos(math.pi * (n - 2) / 8) + 1) * 9e-4 for n in range(3, 11)]
    assert rates == pytest.approx([0.0, 5e-4, 1e-3, *cos], rel=1e-6)


def test_min_lr_alone_is_megatrons_linear_default() -> None:
    """Setting only min_lr (verl's run_hy_v3_megatron.sh) gives verl's Megatron default: linear decay."""
    rates = _rates({"min_lr": 0.0, "total_training_steps": 4}, 5)
    assert rates == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4, 0.0])


def test_inverse_square_root_and_constant() -> None:
    """inverse-square-root: lr·√w/√n floored at min_lr; constant: lr after the warm-up."""
    rates = _rates({"lr_decay_style": "inverse-square-root", "lr_warmup_steps": 4, "lr_decay_steps": 100}, 10)
    assert rates[4:] == pytest.approx([1e-3 * 2 / math.sqrt(n) for n in range(4, 10)])
    assert _rates({"lr_decay_style": "constant", "lr_warmup_steps": 2, "lr_decay_steps": 5}, 5) == pytest.approx(
        [0.0, 5e-4, 1e-3, 1e-3, 1e-3]
    )


@pytest.mark.parametrize("wsd", ["linear", "cosine", "exponential", "minus_sqrt"])
def test_wsd_holds_then_anneals(wsd: str) -> None:
    """WSD: lr until lr_decay_steps − lr_wsd_decay_steps, then annealed with lr_wsd_decay_style."""
    rates = _rates(
        {"lr_decay_style": "WSD", "lr_decay_steps": 8, "lr_wsd_decay_steps": 4, "lr_wsd_decay_style": wsd}, 10
    )
    coeff = {
        "linear": lambda q: 1 - q,
        "cosine": lambda q: 0.5 * (math.cos(math.pi * q) + 1),
        "exponential": lambda q: 2 * 0.5**q - 1,
        "minus_sqrt": lambda q: 1 - math.sqrt(q),
    }[wsd]
    assert rates[:5] == pytest.approx([1e-3] * 5)
    assert rates[5:9] == pytest.approx([1e-3 * coeff((n - 4) / 4) for n in range(5, 9)], abs=1e-12)
    assert rates[9] == 0.0


@pytest.mark.parametrize(
    "optim",
    [
        {
            "lr_decay_style": "linear",
            "lr_warmup_steps": 3,
            "lr_warmup_init": 2e-4,
            "min_lr": 1e-5,
            "lr_decay_steps": 12,
        },
        {"lr_decay_style": "cosine", "lr_warmup_steps_ratio": 0.25, "min_lr": 3e-5, "total_training_steps": 12},
        {"lr_decay_style": "inverse-square-root", "lr_warmup_steps": 3, "min_lr": 2e-4, "lr_decay_steps": 12},
        {"lr_decay_style": "WSD", "lr_decay_steps": 12, "lr_wsd_decay_steps": 5, "lr_wsd_decay_style": "cosine"},
        {"lr_decay_style": "constant", "lr_warmup_steps": 2, "lr_decay_steps": 12},
    ],
)
def test_equals_megatron_cores_scheduler(optim: dict[str, Any]) -> None:
    """Step for step, the rates of megatron-core's OptimizerParamScheduler built as verl builds it."""
    scheduler_module = pytest.importorskip("megatron.core.optimizer_param_scheduler")
    config = OptimConfig.from_mapping(OmegaConf.create({"lr": 1e-3, **optim}))
    decay = config.lr_decay_steps or config.total_training_steps
    warmup = config.lr_warmup_steps if config.lr_warmup_steps > 0 else int(config.lr_warmup_steps_ratio * decay)
    reference_optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    reference = scheduler_module.OptimizerParamScheduler(
        reference_optimizer,
        init_lr=config.lr_warmup_init or 0.0,
        max_lr=config.lr,
        min_lr=config.min_lr or 0.0,
        lr_warmup_steps=warmup,
        lr_decay_steps=decay,
        lr_decay_style=config.lr_decay_style,
        start_wd=config.weight_decay,
        end_wd=config.weight_decay,
        wd_incr_steps=max(config.total_training_steps, 1),
        wd_incr_style="constant",
        use_checkpoint_opt_param_scheduler=False,
        override_opt_param_scheduler=True,
        wsd_decay_steps=config.lr_wsd_decay_steps,
        lr_wsd_decay_style=config.lr_wsd_decay_style or "exponential",
    )
    expected = []
    for _ in range(15):
        expected.append(reference_optimizer.param_groups[0]["lr"])
        reference.step(1)
    assert _rates(optim, 15) == pytest.approx(expected, rel=1e-9, abs=1e-15)


def _resumed_rates(use_checkpoint: bool) -> list[float]:
    """Three steps of a linear schedule to 1e-4 saved, then resumed under min_lr=5e-4 for three more."""
    first = {"min_lr": 1e-4, "lr_decay_steps": 6, "use_checkpoint_opt_param_scheduler": use_checkpoint}
    optimizer, scheduler = _build(first)
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    state = scheduler.state_dict()
    optimizer, scheduler = _build({**first, "min_lr": 5e-4})
    scheduler.load_state_dict(state)
    rates = []
    for _ in range(3):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def test_resume_keeps_configured_schedule_unless_use_checkpoint() -> None:
    """use_checkpoint_opt_param_scheduler=false: the resumed run's min_lr from step 3; true: the checkpoint's."""
    assert _resumed_rates(False) == pytest.approx([5e-4 + 5e-4 * (1 - n / 6) for n in (3, 4, 5)])
    assert _resumed_rates(True) == pytest.approx([1e-4 + 9e-4 * (1 - n / 6) for n in (3, 4, 5)])


@pytest.mark.parametrize(
    ("optim", "message"),
    [
        ({"lr_decay_style": "poly"}, "lr_decay_style='poly' is not one of Megatron's"),
        ({"min_lr": 0.0}, "needs actor_rollout_ref.actor.optim.lr_decay_steps or"),
        ({"lr_decay_style": "WSD", "lr_decay_steps": 5}, "lr_decay_style=WSD needs"),
        ({"min_lr": 1.0, "lr_decay_steps": 5}, "must not exceed lr"),
        ({"lr_warmup_steps": 5, "lr_decay_steps": 5}, "the 5 warm-up steps must be fewer than the 5 decay steps"),
        ({"weight_decay_incr_style": "step", "lr_decay_steps": 5}, "weight_decay_incr_style='step'"),
    ],
)
def test_bad_schedule_is_one_error_naming_the_key(optim: dict[str, Any], message: str) -> None:
    """Values Megatron would assert on are errors naming the key."""
    with pytest.raises(RLCoreError, match=message.replace("(", r"\(").replace("+", r"\+")):
        _build(optim)


def test_a_run_reports_the_megatron_rates(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A real run with lr_decay_style=linear and min_lr logs verl's rates as actor/lr, step by step."""
    _, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        make_tiny_task(tmp_path / "task"),
        "trainer.total_training_steps=3",
        "trainer.test_freq=0",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        f"{KEY}.lr_decay_style=linear",
        f"{KEY}.min_lr=1e-4",
    )
    rates = [row["actor/lr"] for row in read_metrics(run_dir / "metrics.jsonl") if "actor/lr" in row]
    assert rates == pytest.approx([1e-3, 1e-4 + 9e-4 * 2 / 3, 1e-4 + 9e-4 / 3])
