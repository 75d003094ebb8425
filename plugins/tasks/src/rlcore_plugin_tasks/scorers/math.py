"""MATH scorer: the last ``\\boxed`` answer against the ground truth, as verl scores MATH data sources.

verl's default reward for ``lighteval/MATH``, ``DigitalLearningGmbH/MATH-lighteval`` and
``HuggingFaceH4/MATH-500`` is ``verl/utils/reward_score/math_reward.py`` (the Hendrycks-MATH string
normalisation of lm-evaluation-harness); this module follows it (checked against verl 0.9.0 and the
0.10 development branch, whose ``math_reward.py`` is the same): the answer is the content of the last
``\\boxed{...}`` (braces matched) or ``\\boxed x`` (to the next ``$``), else of the last ``\\fbox{...}``;
answer and ground truth are equal when their :func:`normalize_answer` forms are, and a normalisation that
verl's code abandons (two ``\\text{ `` unit groups, a ``\\sqrt`` at the very end) compares the raw strings.

Deliberate differences, where verl is plainly wrong (each pinned by ``plugins/tasks/tests/test_verl_scorers.py``):

1. ``\\fbox{...}`` answers are scored; verl finds them but then asserts that the box starts with
   ``\\boxed{`` and scores every ``\\fbox`` answer 0.
2. The last ``\\boxed`` wins whatever its form; verl takes the last ``\\boxed x`` (space form) whenever the
   text has one, even before a later ``\\boxed{...}``.
3. A ``\\boxed x`` answer stops at the next ``$`` *or the end of its line*; verl's runs to the next ``$``,
   so without one it swallows the rest of the response.
4. ``\\boxed {x}`` (white space before the brace) is the brace form, giving ``x``; verl takes a space for
   the space form and keeps the braces (``{x}``, which never matches) and scores other white space 0.
5. A ground truth that is itself boxed is unboxed first; verl compares with the ``\\boxed{...}`` text and
   scores every response 0.
6. When the ``math_verify`` package is installed (``pip install 'rlcore[math]'``) a symbolic check is
   tried after the string comparison, so ``\\frac{1}{2}`` and ``0.5*1`` or ``2x`` and ``x*2`` match;
   verl's default leaves it as a commented-out option. Without the package the scores are verl's.

``docs/scorers.md`` lists the same differences.
"""

from __future__ import annotations

import functools
import re
import threading
from types import ModuleType
from typing import Any

from rlcore.api import ground_truth_as_text

#: the last ``\boxed`` token of a text, then what follows it: braces (maybe after white space) or a space
_BOXED = re.compile(r"\\boxed")
_FBOX = re.compile(r"\\fbox")
_BRACE_AFTER = re.compile(r"\s*\{")
#: math_verify's own (signal-based) timeout, used only in the main thread
MATH_VERIFY_TIMEOUT_S = 5


def _braced(text: str, start: int) -> str | None:
    """The content of the brace group opening at ``text[start] == "{"`` (braces matched), or None when
    it never closes."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return None


def extract_boxed(text: str) -> str | None:
    """The answer in ``text``: the content of its last ``\\boxed`` (or, with none, its last ``\\fbox``), or
    None when there is none or it is malformed.

    ``\\boxed{...}`` and ``\\boxed {...}`` give the matched-brace content (``\\boxed{\\frac{1}{2}}`` gives
    ``\\frac{1}{2}``; an unclosed brace gives None); ``\\boxed x`` gives ``x`` up to the next ``$`` or the
    end of the line. A last ``\\boxed`` followed by anything else (``\\boxed5``) gives None, as in verl.
    """
    boxes = list(_BOXED.finditer(text)) or list(_FBOX.finditer(text))
    if not boxes:
        return None
    end = boxes[-1].end()
    brace = _BRACE_AFTER.match(text, end)
    if brace is not None:
        return _braced(text, brace.end() - 1)
    if text.startswith(" ", end) and boxes[-1].group() == "\\boxed":
        return re.split(r"[$\n]", text[end + 1 :], maxsplit=1)[0].strip()
    return None


def _fix_sqrt(s: str) -> str:
    """``\\sqrt3`` → ``\\sqrt{3}``: the character after each ``\\sqrt`` is braced unless it is a brace."""
    head, *rest = s.split("\\sqrt")
    for part in rest:
        if not part:
            raise ValueError("\\sqrt at the end")
        head += "\\sqrt" + (part if part[0] == "{" else "{" + part[0] + "}" + part[1:])
    return head


def _fix_fracs(s: str) -> str:
    """``\\frac12`` → ``\\frac{1}{2}`` and ``\\frac1{72}`` → ``\\frac{1}{72}`` (not ``\\frac{72}1``); a
    ``\\frac`` with fewer than two characters after it leaves the string as it was."""
    head, *rest = s.split("\\frac")
    for part in rest:
        head += "\\frac"
        if part.startswith("{"):
            head += part
        elif len(part) < 2:
            return s
        elif part[1] != "{":
            head += "{" + part[0] + "}{" + part[1] + "}" + part[2:]
        else:
            head += "{" + part[0] + "}" + part[1:]
    return head


def _fix_a_slash_b(s: str) -> str:
    """``3/4`` → ``\\frac{3}{4}`` when both sides are integers written plainly."""
    parts = s.split("/")
    if len(parts) != 2:
        return s
    try:
        a, b = int(parts[0]), int(parts[1])
    except ValueError:
        return s
    return f"\\frac{{{a}}}{{{b}}}" if s == f"{a}/{b}" else s


def normalize_answer(answer: str) -> str:
    """The Hendrycks-MATH normal form of a LaTeX answer (verl's ``strip_string``), so that equivalent
    spellings compare equal as strings.

    In order: drop line breaks and ``\\!``; ``\\\\`` → ``\\``; ``tfrac``/``dfrac`` → ``frac``; drop
    ``\\left``/``\\right``, degree marks (``^{\\circ}``, ``^\\circ``) and ``\\$``; cut a unit on the right
    (everything from ``\\text{ ``); drop ``\\%``; ``.5`` → ``0.5``; drop a ``k =`` prefix (at most two
    characters before a single ``=``); brace ``\\sqrt3``; drop spaces; brace ``\\frac12`` shorthand;
    ``0.5`` → ``\\frac{1}{2}``; integer ``a/b`` → ``\\frac{a}{b}``.

    Raises ValueError where verl's normalisation fails (more than one ``\\text{ `` group, a ``\\sqrt`` at
    the end): :func:`is_equiv` then compares the raw strings, as verl does.
    """
    s = answer.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "")
    if "\\text{ " in s:
        units = s.split("\\text{ ")
        if len(units) != 2:
            raise ValueError("more than one \\text{ unit group")
        s = units[0]
    s = s.replace("\\%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:
        s = sides[1]
    s = _fix_sqrt(s).replace(" ", "")
    s = _fix_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _fix_a_slash_b(s)


def is_equiv(answer: str, ground_truth: str) -> bool:
    """Whether two answers are equal after :func:`normalize_answer` (as raw strings where it fails)."""
    try:
        return normalize_answer(answer) == normalize_answer(ground_truth)
    except ValueError:
        return answer == ground_truth


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
    """1.0 when the answer of ``solution_str`` (:func:`extract_boxed`) matches ``ground_truth`` (unboxed
    first when it is boxed itself), else 0.0."""
    answer = extract_boxed(solution_str)
    if answer is None:
        return 0.0
    truth = extract_boxed(ground_truth) if "\\boxed" in ground_truth or "\\fbox" in ground_truth else None
    truth = ground_truth if truth is None else truth
    return 1.0 if is_equiv(answer, truth) or _symbolic_equal(answer, truth) else 0.0


def score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> float:
    """The registered ``reward_scorer`` for MATH data sources: 1 or 0."""
    return compute_score(solution_str, ground_truth_as_text(ground_truth))
