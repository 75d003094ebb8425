"""``bench/rollout.py``'s :func:`compare_generate` (which ``bench/gpu.py`` imports): on CPU it runs the HF engine
and ``model.generate`` on the same rows and returns every documented field, both sides generating exactly
rows x response_length tokens. Speeds are measured by the bench itself, never asserted here."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "rollout.py"

pytestmark = pytest.mark.usefixtures("single_intra_op_thread")


def load_bench() -> ModuleType:
    """``bench/rollout.py`` as a module (the bench folder is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_rollout", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_compare_generate_reports_both_sides_on_the_same_rows(tiny_model_dir: Path) -> None:
    """Five prompts of different lengths, 7 tokens each: the fields, the token counts, a positive ratio."""
    prompts = ["hello", "what is 1 + 2", "a b c d e f", "x", "once upon a time"]
    result = load_bench().compare_generate(tiny_model_dir, prompts, 7, "cpu", "float32", repeats=1)
    json.dumps(result)
    assert {key: result[key] for key in ("device", "dtype", "rows", "response_length", "repeats")} == {
        "device": "cpu",
        "dtype": "float32",
        "rows": 5,
        "response_length": 7,
        "repeats": 1,
    }
    assert result["prompt_tokens"] >= 5 and result["device_name"]
    for side in ("engine", "generate"):
        assert result[side]["tokens"] == 5 * 7
        assert result[side]["seconds"] > 0 and result[side]["tokens_per_s"] > 0
    assert result["engine"]["rows_per_chunk"] == 5 and result["engine"]["graph_step_share"] == 0.0
    assert "engine_sleep_wake" not in result  # CUDA only
    assert result["engine_vs_generate"] == pytest.approx(
        result["engine"]["tokens_per_s"] / result["generate"]["tokens_per_s"], rel=0.01
    )
