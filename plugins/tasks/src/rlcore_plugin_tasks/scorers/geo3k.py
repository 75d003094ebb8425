"""Geometry3K scorer: verl's ``hiyouga/geometry3k`` reward, 0.9 × answer accuracy + 0.1 × format.

verl (``verl/utils/reward_score/geo3k.py``) scores the content of the last ``\\boxed{}`` against the ground
truth with mathruler's ``grade_answer`` and adds 0.1 when the whole response has the format
``<think>...</think>...\\boxed{...}...``. Here the answer is extracted and compared with the MATH scorer's
rules (:func:`rlcore_plugin_tasks.scorers.math.compute_score`: the last ``\\boxed``, its normalisation and, when installed, math-verify's
symbolic check) instead of mathruler's, which is not a dependency: both accept the same spellings of the
numbers and LaTeX fractions geo3k's answers are, and differ only on rarer forms (mathruler also strips
``\\text{...}`` units and compares some expressions with sympy).
"""

from __future__ import annotations

import re
from typing import Any

from rlcore.api import ground_truth_as_text
from rlcore_plugin_tasks.scorers import math as math_scorer

FORMAT_SCORE = 0.1
_FORMAT = re.compile(r"<think>.*</think>.*\\boxed\{.*\}.*", re.DOTALL)


def format_reward(solution_str: str) -> float:
    """1.0 when the response is reasoning in ``<think>`` tags followed by a ``\\boxed{}`` answer, else 0.0."""
    return 1.0 if _FORMAT.fullmatch(solution_str) else 0.0


def acc_reward(solution_str: str, ground_truth: str) -> float:
    """1.0 when the last ``\\boxed{}`` answer equals ``ground_truth``, else 0.0."""
    return math_scorer.compute_score(solution_str, ground_truth)


def compute_score(solution_str: str, ground_truth: str, format_score: float = FORMAT_SCORE) -> float:
    """``(1 - format_score) × accuracy + format_score × format``, as verl weighs them."""
    return (1.0 - format_score) * acc_reward(solution_str, ground_truth) + format_score * format_reward(solution_str)


def score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> float:
    """The registered ``reward_scorer`` for ``hiyouga/geometry3k``: 0, 0.1, 0.9 or 1."""
    return compute_score(solution_str, ground_truth_as_text(ground_truth))
