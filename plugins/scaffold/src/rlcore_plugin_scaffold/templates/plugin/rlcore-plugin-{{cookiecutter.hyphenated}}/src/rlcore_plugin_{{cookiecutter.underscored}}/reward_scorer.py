"""The reward scorer for samples whose ``data_source`` is ``{{ cookiecutter.hyphenated }}``.

What it computes: 1.0 when the last number in the response equals the ground truth (as numbers, so
"42.0" matches "42"), else 0.0. The reward manager calls it once per sample with the decoded response.

What to change: :func:`compute_score`. It may return a float or a dict with ``"score"`` plus extra keys
(reported per sample). Register it under more ``data_source`` strings with ``aliases=`` in ``hooks.py``.
Keep it total: malformed responses must give a number, not an exception (the contract suite in
``tests/test_reward_scorer.py`` feeds it garbage).
"""

from __future__ import annotations

import re
from typing import Any

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def as_number(text: str) -> float | None:
    """``text`` as a float (thousands separators removed), or None when it is not a number."""
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> float:
    """1.0 when the response's last number equals ``ground_truth``, else 0.0."""
    numbers = NUMBER.findall(solution_str.replace(",", ""))
    if not numbers:
        return 0.0
    answer, truth = as_number(numbers[-1]), as_number(str(ground_truth))
    return float(answer is not None and answer == truth)
