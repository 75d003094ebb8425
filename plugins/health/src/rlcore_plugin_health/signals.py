"""The monitors' arithmetic: pure functions over metric rows and response texts (no torch, no rlcore state).

A *row* is one step's metrics as written to ``metrics.jsonl`` (verl's names, with ``"step"``); a *history*
is the rows so far, oldest first. Keys that are absent, or whose value is not a number, are skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from statistics import median

#: MAD x this estimates the standard deviation of normally distributed values
MAD_TO_SIGMA = 1.4826


def number(row: Mapping[str, object], key: str) -> float | None:
    """``row[key]`` as a float, or None when it is absent or not a number (a bool is not a number)."""
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def matching_keys(row: Mapping[str, object], pattern: str) -> list[str]:
    """The keys of ``row`` that match the fnmatch ``pattern`` (case-sensitive), sorted."""
    return sorted(key for key in row if fnmatchcase(key, pattern))


def tail(history: Sequence[Mapping[str, object]], key: str, count: int) -> list[tuple[int, float]]:
    """The last ``count`` ``(step, value)`` points of ``key`` in ``history``, oldest first (scans from the end)."""
    points: list[tuple[int, float]] = []
    for row in reversed(history):
        value = number(row, key)
        if value is not None:
            points.append((int(number(row, "step") or 0), value))
            if len(points) >= count:
                break
    points.reverse()
    return points


def window(history: Sequence[Mapping[str, object]], first_step: int) -> Sequence[Mapping[str, object]]:
    """The rows of ``history`` at steps >= ``first_step`` (the history is in step order; scans from the end)."""
    start = len(history)
    while start > 0 and (number(history[start - 1], "step") or 0) >= first_step:
        start -= 1
    return history[start:]


def first_values(history: Sequence[Mapping[str, object]], key: str, count: int) -> list[tuple[int, float]]:
    """The first ``count`` ``(step, value)`` points of ``key`` in ``history``."""
    points: list[tuple[int, float]] = []
    for row in history:
        value = number(row, key)
        if value is not None:
            points.append((int(number(row, "step") or 0), value))
            if len(points) >= count:
                break
    return points


def slope(points: Sequence[tuple[int, float]]) -> float:
    """The least-squares slope of ``value`` over ``step`` (0.0 with fewer than two distinct steps)."""
    if len(points) < 2:
        return 0.0
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    var_x = sum((x - mean_x) ** 2 for x, _ in points)
    if var_x == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / var_x


def robust_z(value: float, window: Sequence[float], floor: float) -> float:
    """How many robust standard deviations ``value`` lies above the median of ``window``:
    ``(value - median) / max(1.4826 * MAD, floor)``. ``floor`` (> 0) keeps a near-constant window from
    turning a tiny wobble into a huge score."""
    centre = median(window)
    mad = median(abs(x - centre) for x in window)
    return (value - centre) / max(MAD_TO_SIGMA * mad, floor)


def ngram_repeat_rate(text: str, n: int) -> float | None:
    """The share of the word ``n``-grams of ``text`` that repeat an earlier one: 1 − distinct / total
    (0.0: no repeats; near 1.0: one phrase over and over). None when the text has fewer than ``n + 1``
    words (too short to say)."""
    words = text.split()
    total = len(words) - n + 1
    if total < 2:
        return None
    grams = {tuple(words[i : i + n]) for i in range(total)}
    return 1.0 - len(grams) / total


def shares(totals: Mapping[str, float]) -> dict[str, float]:
    """Each component's share of the summed magnitudes ``sum(|total|)`` (empty when that sum is 0)."""
    whole = sum(abs(v) for v in totals.values())
    if whole == 0:
        return {}
    return {key: abs(value) / whole for key, value in totals.items()}


def nonfinite_keys(row: Mapping[str, object], patterns: Iterable[str]) -> list[str]:
    """The keys of ``row`` that match one of ``patterns`` and hold NaN or ±inf, sorted."""
    found = set()
    for pattern in patterns:
        for key in matching_keys(row, pattern):
            value = number(row, key)
            if value is not None and not math.isfinite(value):
                found.add(key)
    return sorted(found)


def positive_keys(row: Mapping[str, object], patterns: Iterable[str]) -> list[str]:
    """The keys of ``row`` that match one of ``patterns`` and hold a number > 0 (counters of failures), sorted."""
    found = set()
    for pattern in patterns:
        for key in matching_keys(row, pattern):
            value = number(row, key)
            if value is not None and value > 0:
                found.add(key)
    return sorted(found)
