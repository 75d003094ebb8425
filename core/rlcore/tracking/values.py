"""Metric values: averaging per-rank lists, JSON-safe conversion and compact formatting (a leaf module: the sinks, the progress bar,
the report and the trackers all use it)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def to_json_value(value: Any) -> Any:
    """Convert a metric value to a JSON-safe Python value.

    Python, numpy and torch integers and booleans become ``int``; floats (of any of those types, and
    0-d or one-element arrays and tensors) become ``float``, with non-finite values as ``None``; strings
    are kept; other arrays become lists; anything else becomes its ``str``.
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(v) for v in value]
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return to_json_value(item())
        except (ValueError, RuntimeError):  # more than one element
            tolist = getattr(value, "tolist", None)
            if callable(tolist):
                return to_json_value(tolist())
    try:
        return to_json_value(float(value))
    except (TypeError, ValueError):
        return str(value)


def format_value(value: Any) -> str:
    """Format a metric value compactly: ``3``, ``0.5``, ``0.01235``, ``12.3457``, ``1.235e-05``, ``nan``."""
    value = to_json_value(value)
    if value is None:
        return "nan"
    if isinstance(value, int) or not isinstance(value, float):
        return str(value)
    if value == 0.0:
        return "0"
    if 1.0 <= abs(value) < 1e6:
        return f"{value:.4f}".rstrip("0").rstrip(".")
    if 1e-3 <= abs(value) < 1.0:
        return f"{value:.4g}"
    return f"{value:.3e}"


def reduce_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """Average list-valued metrics (one value per rank or micro-batch) into floats."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, (list, tuple)):
            values = [float(v) for v in value]
            out[key] = sum(values) / len(values) if values else float("nan")
        else:
            out[key] = float(value)
    return out
