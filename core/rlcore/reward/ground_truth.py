"""Ground truths for scorers that compare text: turned into text where the meaning is clear, flagged where not.

A parquet or pandas column of answers is often not text: an integer column with a missing value becomes
floats (``33.0``), a list column holds ``["33"]``. A scorer that compares the extracted answer with
``str(ground_truth)`` then scores a correct ``33`` as 0, silently. :func:`ground_truth_text` gives the text
such a scorer should compare with, or None when the value has no clear text form (None, NaN, several
answers, a dict), which the reward manager counts in ``reward/ground_truth_nonstring``.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np


def _scalar_text(value: Any) -> str | None:
    """The text of one scalar ground truth, or None."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):  # True/False are not answers a scorer extracts from text
        return None
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        number = float(value)
        if not math.isfinite(number):
            return None
        return str(int(number)) if number.is_integer() else repr(number)
    return None


def ground_truth_text(value: Any) -> str | None:
    """The text a text-comparing scorer should compare with, or None when ``value`` has no clear text form.

    A string is kept as it is; an integer (Python or numpy) gives its digits; a finite float with an integral
    value gives the integer's digits (``33.0`` → ``"33"``), another finite float its shortest form
    (``0.5`` → ``"0.5"``); a 0-d array, or a list, tuple or array of exactly one such value, gives that
    value's text. None, NaN, infinities, booleans, several values, dicts and other objects give None.
    """
    if isinstance(value, np.ndarray):
        value = value.tolist() if value.ndim else value.item()
    if isinstance(value, (list, tuple)):
        return _scalar_text(value[0]) if len(value) == 1 else None
    return _scalar_text(value)


def ground_truth_as_text(value: Any) -> str:
    """:func:`ground_truth_text`, else ``str(value)`` (what a text-comparing scorer compares with)."""
    text = ground_truth_text(value)
    return str(value) if text is None else text
