"""``bench/weight_sync_memory.py --measure bytes``: one real run of its ``bytes_run`` on the tiny model reports what
the ``delta`` transport sent against a full sync, and bad options are named with exit status 2. The figures are
measured by the bench itself, never asserted here."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "weight_sync_memory.py"

pytestmark = pytest.mark.usefixtures("single_intra_op_thread")


def load_bench() -> ModuleType:
    """``bench/weight_sync_memory.py`` as a module (the bench folder is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_weight_sync_memory", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_bf16_delta_run_reports_its_bytes_per_step(tiny_model_dir: Path) -> None:
    (row,) = load_bench().bytes_run(tiny_model_dir, "bf16", 1e-5, 1, "delta")
    assert row["step"] == 1 and row["checksum_diff"] == 0.0
    assert row["bytes_full"] * 2 == row["trainer_bytes"]  # a full sync in bf16: half the float32 tensors' bytes
    assert 0 < row["bytes"] <= row["bytes_full"] and row["delta_fraction"] == row["bytes"] / row["bytes_full"]
    assert 0 < row["changed_elements"] <= 1 and row["sync_cpu_s"] > 0 and row["encode_s"] > 0


@pytest.mark.parametrize(
    ("option", "message"),
    [(["--rollout-dtypes", "fp16"], "--rollout-dtypes='fp16'"), (["--lrs", "fast"], "--lrs='fast'")],
    ids=["dtype", "lr"],
)
def test_bad_options_are_named(option: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--measure", "bytes", *option], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 2 and f"error: {message}" in result.stderr, result.stderr[-2000:]
