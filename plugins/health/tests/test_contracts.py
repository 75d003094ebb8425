"""Every built-in monitor passes the test kit's health-monitor contract: registered with a spec, settings at
``trainer.monitors.<name>`` with defaults, silent on an empty and on a healthy history, and reporting once,
well formed, on rows that show its condition."""

from __future__ import annotations

import math

from rlcore_testkit.contracts import HealthMonitorContract
from rlcore_testkit.contracts.health import VAL_KEY, steady_rows

from rlcore.api import ResponseSample


def _rows(steps: int, **series: object) -> list[dict[str, float]]:
    """``steps`` rows; each keyword is a metric key (``__`` for ``/``) and a function of the step."""
    return [
        {"step": float(step), **{key.replace("__", "/"): f(step) for key, f in series.items()}}  # type: ignore[operator]
        for step in range(1, steps + 1)
    ]


def _with_validation(rows: list[dict[str, float]], value: object, every: int = 5) -> list[dict[str, float]]:
    for row in rows:
        if int(row["step"]) % every == 0:
            row[VAL_KEY] = value(int(row["step"]))  # type: ignore[operator]
    return rows


class TestRewardHacking(HealthMonitorContract):
    component_name = "reward_hacking"
    # the training reward climbs 0.02 a step from step 10 while the validation reward falls
    firing_rows = _with_validation(
        _rows(40, critic__score__mean=lambda s: 0.5 + 0.02 * max(0, s - 10)), lambda s: 0.6 - 0.005 * max(0, s - 10)
    )


class TestLengthBlowup(HealthMonitorContract):
    component_name = "length_blowup"
    firing_rows = _rows(12, response_length__clip_ratio=lambda s: 0.0 if s < 5 else 0.6)


class TestEntropyCollapse(HealthMonitorContract):
    component_name = "entropy_collapse"
    firing_rows = _rows(20, actor__entropy=lambda s: 1.2 * 0.7**s)


class TestKlSpike(HealthMonitorContract):
    component_name = "kl_spike"
    firing_rows = _rows(15, actor__ppo_kl=lambda s: 0.5 if s == 10 else 0.001 + 0.0002 * math.sin(s))


class TestGradNormSpike(HealthMonitorContract):
    component_name = "grad_norm_spike"
    firing_rows = _rows(15, actor__grad_norm=lambda s: 80.0 if s >= 10 else 1.0 + 0.1 * math.sin(s))


class TestClipSaturation(HealthMonitorContract):
    component_name = "clip_saturation"
    firing_rows = _rows(12, actor__pg_clipfrac=lambda s: 0.05 if s < 5 else 0.5)


class TestLogprobMismatch(HealthMonitorContract):
    component_name = "logprob_mismatch"
    firing_rows = _rows(12, training__rollout_probs_diff_mean=lambda s: 0.01 if s < 5 else 0.2)


class TestNonfinite(HealthMonitorContract):
    component_name = "nonfinite"
    firing_rows = _rows(8, actor__pg_loss=lambda s: math.nan if s == 4 else 0.1, reward__scorer_nan=lambda s: 0.0)


class TestRepetition(HealthMonitorContract):
    component_name = "repetition"
    firing_rows = steady_rows(10)

    def samples(self, step: int, firing: bool) -> list[ResponseSample]:
        """From step 5 on the firing run's responses loop one phrase."""
        if not firing or step < 5:
            return super().samples(step, firing)
        text = "the answer is " * 10
        return [ResponseSample(prompt="1+1=", response=text, score=0.0, response_length=30) for _ in range(8)]


class TestRewardDominance(HealthMonitorContract):
    component_name = "reward_dominance"
    firing_rows = steady_rows(10)

    def samples(self, step: int, firing: bool) -> list[ResponseSample]:
        """Two components; on the firing run the format bonus takes over from step 4."""
        bonus = 2.0 if firing and step >= 4 else 0.5
        return [
            ResponseSample(
                prompt="1+1=",
                response="2",
                score=(i % 2) + bonus,
                response_length=1,
                extra={"correct": float(i % 2 if not firing or step < 4 else 0), "format_bonus": bonus, "acc": 1.0},
            )
            for i in range(8)
        ]
