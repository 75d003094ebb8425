"""The monitors' arithmetic (rlcore_plugin_health.signals) and when a condition is reported (streak)."""

from __future__ import annotations

import math

import pytest
from rlcore_plugin_health.signals import (
    first_values,
    matching_keys,
    ngram_repeat_rate,
    nonfinite_keys,
    number,
    positive_keys,
    robust_z,
    shares,
    slope,
    tail,
    window,
)
from rlcore_plugin_health.streak import Streak

HISTORY: list[dict[str, object]] = [
    {"step": 0, "val": 0.5},
    {"step": 1, "a": 1.0},
    {"step": 2, "a": 2.0, "flag": True},
    {"step": 3, "a": "x"},
    {"step": 4, "a": 4.0, "val": 0.25},
]


def test_number_skips_absent_text_and_bools() -> None:
    assert number(HISTORY[1], "a") == 1.0
    assert number(HISTORY[3], "a") is None
    assert number(HISTORY[2], "flag") is None
    assert number(HISTORY[0], "a") is None


def test_points_from_the_end_and_the_start() -> None:
    assert tail(HISTORY, "a", 2) == [(2, 2.0), (4, 4.0)]
    assert tail(HISTORY, "a", 9) == [(1, 1.0), (2, 2.0), (4, 4.0)]
    assert [row["step"] for row in window(HISTORY, 3)] == [3, 4]
    assert window(HISTORY, 9) == [] and window(HISTORY, -5) == HISTORY
    assert first_values(HISTORY, "a", 2) == [(1, 1.0), (2, 2.0)]
    assert matching_keys({"val-core/x/reward/mean@1": 1, "val-aux/x": 2}, "val-core/*/reward/mean@*") == [
        "val-core/x/reward/mean@1"
    ]


def test_slope_is_least_squares_per_step() -> None:
    assert slope([(0, 1.0), (1, 3.0), (2, 5.0)]) == pytest.approx(2.0)
    assert slope([(0, 1.0), (10, 0.0)]) == pytest.approx(-0.1)
    assert slope([(3, 1.0)]) == 0.0
    assert slope([(3, 1.0), (3, 2.0)]) == 0.0


def test_robust_z_uses_median_and_mad_with_a_floor() -> None:
    window = [1.0, 2.0, 3.0, 4.0, 100.0]  # one outlier barely moves the median (3) and the MAD (1)
    assert robust_z(3.0 + 1.4826 * 5, window, floor=1e-9) == pytest.approx(5.0)
    assert robust_z(2.0, [2.0] * 5, floor=0.5) == 0.0
    assert robust_z(3.0, [2.0] * 5, floor=0.5) == pytest.approx(2.0)


def test_ngram_repeat_rate() -> None:
    assert ngram_repeat_rate("the cat sat on the mat", 2) == 0.0
    assert ngram_repeat_rate("go go go go go go", 2) == pytest.approx(1 - 1 / 5)
    assert ngram_repeat_rate("a b a b a b", 2) == pytest.approx(1 - 2 / 5)
    assert ngram_repeat_rate("too short", 2) is None


def test_shares_and_failure_keys() -> None:
    assert shares({"correct": 1.0, "bonus": -3.0}) == {"correct": 0.25, "bonus": 0.75}
    assert shares({"correct": 0.0}) == {}
    row = {"actor/pg_loss": math.nan, "actor/grad_norm": math.inf, "critic/score/mean": 1.0, "reward/scorer_nan": 3.0}
    assert nonfinite_keys(row, ["actor/*", "critic/*"]) == ["actor/grad_norm", "actor/pg_loss"]
    assert positive_keys(row, ["reward/scorer_nan", "*/grad_norm_nonfinite"]) == ["reward/scorer_nan"]


def test_streak_reports_once_per_run_after_patience() -> None:
    streak = Streak(patience=2)
    reports = [streak.update(holds, step) for step, holds in enumerate([True, True, True, False, True, True])]
    assert reports == [None, 0, None, None, None, 4]
    assert Streak().update(True, 7, began_at=3) == 3
