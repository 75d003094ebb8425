"""MATH scorer: the last ``\\boxed{}`` answer against the ground truth.

The answer is compared after a Hendrycks-MATH-style normalisation (:func:`normalize_answer`); when the
``math_verify`` package is installed (``pip install 'rlcore[math]'``) a symbolic check is tried as well,
so ``\\frac{1}{2}`` and ``0.5`` or ``2x`` and ``x*2`` match.
"""

from __future__ import annotations

import functools
import re
import threading
from types import ModuleType
from typing import Any

_BOX_START = re.compile(r"\\(?:boxed|fbox)\s*\{|\\boxed ")
_TEXT_UNITS = re.compile(r"\\(?:text|mbox|mathrm)\{ [^{}]*\}(?:\^\{?\d\}?)?")
_TEXT_WRAP = re.compile(r"\\(?:text|textbf|mbox|mathrm)\{([^{}]*)\}")
_SQRT_SHORT = re.compile(r"\\sqrt(\w)")
_FRAC_TWO_SHORT = re.compile(r"\\frac(\w)(\w)")
_FRAC_NUM_SHORT = re.compile(r"\\frac(\w)\{")
_FRAC_DEN_SHORT = re.compile(r"\\frac\{([^{}]*)\}(\w)")
_INT_SLASH = re.compile(r"^(-?\d+)/(-?\d+)$")
#: math_verify's own (signal-based) timeout, used only in the main thread
MATH_VERIFY_TIMEOUT_S = 5


def extract_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}``, ``\\fbox{...}`` or ``\\boxed x`` in ``text``, or ``None``.

    Braces are matched, so ``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``; an unclosed brace gives
    ``None``. The ``\\boxed x`` form runs to the next ``$`` or the end of the line.
    """
    matches = list(_BOX_START.finditer(text))
    if not matches:
        return None
    last = matches[-1]
    if not last.group().endswith("{"):
        rest = text[last.end() :]
        return re.split(r"[$\n]", rest, maxsplit=1)[0].strip()
    depth = 1
    for i in range(last.end(), len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[last.end() : i]
    return None


def normalize_answer(answer: str) -> str:
    """Normalise a LaTeX answer so that equivalent spellings compare equal as strings.

    Removes line breaks, ``\\!``, ``\\left``/``\\right``, degree marks, ``\\$``, ``\\%``/``%``, unit text
    (``\\text{ cm}``) and a trailing period; unwraps ``\\text{...}``; rewrites ``tfrac``/``dfrac`` as
    ``frac``; adds a leading 0 to ``.5``; drops a short ``x =`` prefix; fixes ``\\sqrt2`` and ``\\frac12``
    shorthand; strips spaces; turns ``0.5`` into ``\\frac{1}{2}`` and ``a/b`` (integers) into
    ``\\frac{a}{b}``.
    """
    s = answer.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "").replace("$", "")
    s = _TEXT_UNITS.sub("", s).strip() or s
    s = _TEXT_WRAP.sub(r"\1", s)
    s = s.replace("\\%", "").replace("%", "")
    s = s.strip().rstrip(".").strip()
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if s.startswith("."):
        s = "0" + s
    parts = s.split("=")
    if len(parts) == 2 and len(parts[0].strip()) <= 2:
        s = parts[1]
    s = _SQRT_SHORT.sub(r"\\sqrt{\1}", s)
    s = s.replace(" ", "")
    s = _FRAC_TWO_SHORT.sub(r"\\frac{\1}{\2}", s)
    s = _FRAC_NUM_SHORT.sub(r"\\frac{\1}{", s)
    s = _FRAC_DEN_SHORT.sub(r"\\frac{\1}{\2}", s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    s = _INT_SLASH.sub(r"\\frac{\1}{\2}", s)
    return s


def is_equiv(answer: str, ground_truth: str) -> bool:
    """Whether two answers are equal after :func:`normalize_answer`."""
    return normalize_answer(answer) == normalize_answer(ground_truth)


@functools.lru_cache(maxsize=1)
def _math_verify() -> ModuleType | None:
    try:
        import math_verify
    except ImportError:
        return None
    return math_verify


def _symbolic_equal(answer: str, ground_truth: str) -> bool:
    """math_verify's verdict on two boxed answers; its signal-based timeout is only usable in the main
    thread, elsewhere the caller (the reward manager's safe scoring) bounds the time."""
    mv = _math_verify()
    if mv is None:
        return False
    limit = MATH_VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    gold = mv.parse(f"\\boxed{{{ground_truth}}}", parsing_timeout=limit)
    pred = mv.parse(f"\\boxed{{{answer}}}", parsing_timeout=limit)
    return bool(gold and pred and mv.verify(gold, pred, timeout_seconds=limit))


def compute_score(solution_str: str, ground_truth: str) -> float:
    """1.0 when the last boxed answer of ``solution_str`` matches ``ground_truth`` (itself boxed or not),
    else 0.0."""
    answer = extract_boxed(solution_str)
    if answer is None:
        return 0.0
    truth = extract_boxed(ground_truth) if "\\boxed" in ground_truth or "\\fbox" in ground_truth else None
    truth = ground_truth if truth is None else truth
    return 1.0 if is_equiv(answer, truth) or _symbolic_equal(answer, truth) else 0.0


def score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> float:
    """The registered ``reward_scorer`` for MATH data sources: 1 or 0."""
    return compute_score(solution_str, str(ground_truth))
