"""GSM8K scorer: compare the number after the last ``####`` with the ground truth (verl's rule)."""

from __future__ import annotations

import re
from typing import Any

from rlcore.api import ground_truth_as_text

#: only the tail of a response is searched, so an answer echoed early in a long response does not count
SOLUTION_CLIP_CHARS = 300
_STRICT = re.compile(r"#### (-?[0-9.,]+)")
_NUMBER = re.compile(r"-?[0-9.,]+")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """The answer in the last 300 characters of ``solution_str``, or ``None``.

    ``strict``: the last ``#### <number>`` with ``,`` and ``$`` removed. ``flexible``: the last run of
    digits, ``.``, ``,`` and ``-`` that contains a digit, kept as written (verl skips only ``""`` and
    ``"."``, so a lone ``","`` could be its answer).
    """
    if method not in ("strict", "flexible"):
        raise ValueError(f"gsm8k extraction method must be 'strict' or 'flexible', got {method!r}")
    tail = solution_str[-SOLUTION_CLIP_CHARS:]
    if method == "strict":
        matches = _STRICT.findall(tail)
        return matches[-1].replace(",", "").replace("$", "") if matches else None
    candidates = [m for m in _NUMBER.findall(tail) if any(c.isdigit() for c in m)]
    return candidates[-1] if candidates else None


def compute_score(
    solution_str: str,
    ground_truth: str,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """``score`` when the extracted answer equals ``ground_truth`` as a string, ``format_score`` when an
    answer was found but differs, 0 when none was found ("72.0" does not equal "72")."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0.0
    return float(score) if answer == str(ground_truth) else float(format_score)


def score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> float:
    """The registered ``reward_scorer`` for ``openai/gsm8k``: strict extraction, 1 or 0."""
    return compute_score(solution_str, ground_truth_as_text(ground_truth))
