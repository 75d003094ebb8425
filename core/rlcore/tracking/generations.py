"""Generation dumps (``trainer.rollout_data_dir`` / ``trainer.validation_data_dir``), in verl's format."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlcore.tracking.sinks import to_json_value


def dump_generations(
    folder: str | Path,
    step: int,
    inputs: Sequence[str],
    outputs: Sequence[str],
    ground_truths: Sequence[Any],
    scores: Sequence[float],
    extras: Mapping[str, Sequence[Any]] | None = None,
) -> Path:
    """Write ``<folder>/<step>.jsonl``: one line per sample with ``input``, ``output``, ``gts``, ``score``,
    ``step`` and the per-sample extra keys the scorer returned (as verl's ``_dump_generations``)."""
    path = Path(folder) / f"{step}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    extras = extras or {}
    with path.open("w", encoding="utf-8") as handle:
        for i, (text_in, text_out, truth, score) in enumerate(zip(inputs, outputs, ground_truths, scores)):
            row = {"input": text_in, "output": text_out, "gts": truth, "score": score, "step": step}
            row.update({key: values[i] for key, values in extras.items() if len(values) > i})
            handle.write(json.dumps(to_json_value(row), ensure_ascii=False) + "\n")
    return path
