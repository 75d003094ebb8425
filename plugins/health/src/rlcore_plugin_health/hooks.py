"""The plugin's hooks: the monitors' settings (``trainer.monitors.<name>``), the monitors themselves and the
demo preset with a reward loophole.

This module must stay free of torch imports: ``rlcore plugins`` and the command line import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlcore import hookimpl
from rlcore.api import HealthMonitorSpec

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"

#: each monitor: (name, class, what it reads, responses per step it wants, one-line description)
_MONITORS: tuple[tuple[str, str, tuple[str, ...], int, str], ...] = (
    (
        "reward_hacking",
        "RewardHacking",
        ("critic/score/mean", "val-core/*/reward/mean@*"),
        0,
        "the training reward rising while the validation reward is flat or falling",
    ),
    ("length_blowup", "LengthBlowup", ("response_length/clip_ratio",), 0, "responses cut at the length limit"),
    ("entropy_collapse", "EntropyCollapse", ("actor/entropy",), 0, "the policy's entropy collapsing"),
    ("kl_spike", "KlSpike", ("actor/ppo_kl", "actor/kl_loss"), 0, "a KL spike (robust z-score)"),
    ("grad_norm_spike", "GradNormSpike", ("actor/grad_norm", "critic/grad_norm"), 0, "a gradient-norm spike"),
    ("clip_saturation", "ClipSaturation", ("actor/pg_clipfrac",), 0, "the PPO clip fraction staying high"),
    ("repetition", "Repetition", (), 16, "sampled responses repeating word n-grams"),
    ("reward_dominance", "RewardDominance", (), 32, "one reward component carrying most of the reward"),
    (
        "logprob_mismatch",
        "LogprobMismatch",
        ("training/rollout_probs_diff_mean",),
        0,
        "rollout and trainer token probabilities differing",
    ),
    (
        "nonfinite",
        "Nonfinite",
        ("*loss*", "*reward*", "*score*", "*grad_norm*", "*entropy*", "*kl*", "*advantages*"),
        0,
        "NaN or inf in a loss, reward or gradient norm, or scores replaced for not being finite",
    ),
)


@hookimpl
def config_defaults() -> list[Any]:
    """Declare each monitor's section ``trainer.monitors.<name>`` (:mod:`rlcore_plugin_health.config`)."""
    from rlcore_plugin_health import monitors

    return [monitor.config_class() for monitor in monitors.MONITORS]


@hookimpl
def register_health_monitors(register: Callable[..., None]) -> None:
    """Register the built-in monitors (all on, action ``warn``; docs/health.md)."""
    for name, cls, reads, samples, description in _MONITORS:
        register(
            name,
            f"rlcore_plugin_health.monitors:{cls}",
            description=description,
            spec=HealthMonitorSpec(reads=reads, samples=samples),
        )


@hookimpl
def register_presets(register: Callable[..., None]) -> None:
    """Register the demo preset ``reward-loophole`` (:mod:`rlcore_plugin_health.loophole`)."""
    register(
        "reward-loophole",
        "rlcore_plugin_health.loophole:preset",
        description="demo: the bundled sums task on a reward with a loophole; reward_hacking stops the run",
    )
