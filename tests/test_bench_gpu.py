"""``bench/gpu.py --device cpu --size tiny``: the GPU benchmark's CPU twin, run as CI runs it.

The same code paths as on a GPU (the build, the HF engine against ``model.generate``, the seed command with
its user overrides, the bundled task's first run from an empty cache), with a tiny model on the CPU. What
is checked is the JSON document's shape and consistency (bench/README.md lists every field); its speed is
measured, never asserted. ``--budget`` is generous so that a busy machine stops no part at its limit.

Slow (``conftest.py``'s LONG_FILES): about three minutes on two idle cores, most of it the bundled task's warm
start from an empty cache, which the benchmark measures on purpose.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU_BENCH = ROOT / "bench" / "gpu.py"


def run_bench(*args: str, timeout: int = 1500) -> subprocess.CompletedProcess[str]:
    """``python bench/gpu.py *args`` with its output captured."""
    return subprocess.run([sys.executable, str(GPU_BENCH), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The JSON of one CPU run of every part (also written to ``--out-dir``, checked below)."""
    out_dir = tmp_path_factory.mktemp("gpu-bench-out")
    result = run_bench("--device", "cpu", "--size", "tiny", "--budget", "1200", "--out-dir", str(out_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    doc = json.loads(result.stdout)
    assert json.loads((out_dir / "gpu.json").read_text())["parts"] == doc["parts"]
    assert {"build.log", "gen.log", "train.log", "bundled.log"} <= {p.name for p in out_dir.iterdir()}
    return doc


def test_every_part_ran_within_its_limit(document: dict[str, Any]) -> None:
    """The build, gen, train and bundled parts ran in that order, each ok and under its own limit, and the
    run records where it ran."""
    assert document["benchmark"] == "gpu" and document["size"] == "tiny" and document["device"] == "cpu"
    assert list(document["parts"]) == ["build", "gen", "train", "bundled"]
    for name, part in document["parts"].items():
        assert part["status"] == "ok", (name, part.get("error"))
        assert 0 < part["seconds"] <= part["limit_s"]
        assert part["gpu"] is None or {"util_mean_pct", "util_max_pct", "memory_used_max_mib"} <= set(part["gpu"])
    assert document["wall_s"] <= document["budget_s"]
    assert set(document["machine"]) == {"cpus", "omp_num_threads", "loadavg_1m_start", "loadavg_1m_end"}
    assert document["gpu_at_start"] is None or "name" in document["gpu_at_start"]
    build = document["parts"]["build"]
    env = build["environment"]
    assert env["torch"] and env["transformers"] and env["device_name"] and env["cuda_available"] in (True, False)
    assert build["model"]["model_type"] == "qwen2" and build["model"]["params"] > 0
    assert build["tokenizer_vocab"] <= build["model"]["vocab_size"]


def test_generation_compares_the_engine_with_generate_on_the_same_rows(document: dict[str, Any]) -> None:
    """Both sides made rows x response tokens per call (``bench/rollout.py``'s ``compare_generate``); the
    ratio is theirs."""
    gen = document["parts"]["gen"]
    expected = gen["rows"] * gen["response_length"]
    assert gen["temperature"] == 1.0 and gen["prompt_tokens_mean"] <= gen["prompt_tokens"]
    for side in ("generate", "engine"):
        entry = gen[side]
        assert 1 <= len(entry["calls"]) <= gen["repeats"] and all(c["tokens"] == expected for c in entry["calls"])
        assert entry["tokens"] == expected and entry["tokens_per_s"] == pytest.approx(
            expected / entry["seconds"], rel=0.01
        )
        assert entry["load_s"] >= 0 and entry["first_call_s"] > 0
        assert entry["max_memory_allocated_gb"] is None  # CPU: no CUDA allocator
    ratio = gen["engine"]["tokens_per_s"] / gen["generate"]["tokens_per_s"]
    assert gen["engine_vs_generate"] == pytest.approx(ratio, abs=0.01)
    assert "engine_sleep_wake" not in gen  # CUDA only


def test_training_reports_steps_mfu_and_the_peak(document: dict[str, Any]) -> None:
    """Two steps of the seed command with the user's overrides: each with its stage times, worker times and
    MFU of the update and the reference pass; the CPU probe's peak; validation before training."""
    train = document["parts"]["train"]
    assert "actor_rollout_ref.rollout.name=hf" in train["user_overrides"]
    assert "actor_rollout_ref.rollout.ignore_eos=true" in train["user_overrides"]
    assert train["steps_done"] == 2 and [s["step"] for s in train["steps"]] == [1, 2]
    assert 0 < train["first_step_s"] < train["seconds"]
    for step in train["steps"]:
        assert {"gen", "ref", "update_actor", "step"} <= set(step["timing_s"])
        assert {"generate_sequences", "compute_ref_log_prob", "update_actor"} <= set(step["timing_worker_s"])
        assert step["mfu"]["actor"] > 0 and step["mfu"]["ref"] > 0
        assert step["max_memory_allocated_gb"] == {}  # CPU
        assert step["response_length_mean"] == 16.0  # EOS ignored: every response is full length
    assert train["last_step"]["step_s"] == train["steps"][-1]["timing_s"]["step"]
    assert train["device_peak"]["source"] in ("probe", "cache") and train["device_peak"]["tflops"] > 0
    assert "timing_s/testing" in train["validation"]


def test_the_train_part_records_the_plan_beside_the_measured_peaks(document: dict[str, Any]) -> None:
    """``rlcore plan`` of the train part's command line: every training phase's predicted peak per rank; on CPU
    no device memory is measured, so nothing is compared (on a GPU each phase is, with its ratio)."""
    train = document["parts"]["train"]
    phases = {phase["name"]: phase for phase in train["plan"]["phases"]}
    assert {"rollout", "old_log_prob", "ref_log_prob", "actor_update"} <= set(phases), train["plan"]
    assert all(phase["peak_bytes"] > 0 for phase in phases.values())
    assert train["plan_vs_measured"] == {}


def test_bundled_first_run_reports_its_curve(document: dict[str, Any]) -> None:
    """The bundled task from an empty cache: two steps, validation at steps 0, 1 and 2."""
    bundled = document["parts"]["bundled"]
    assert bundled["steps_done"] == 2 and 0 < bundled["first_step_s"] < bundled["seconds"]
    (curve,) = bundled["validation"].values()
    assert [step for step, _ in curve] == [0, 1, 2] and all(0 <= reward <= 1 for _, reward in curve)


def test_bad_options_are_one_line_errors() -> None:
    """An unknown size or part: ``error: ...`` and exit status 2, nothing on stdout."""
    for args, text in ((["--size", "7b"], "unknown --size '7b'"), (["--parts", "gen,warp"], "unknown --parts warp")):
        result = run_bench(*args, timeout=60)
        assert result.returncode == 2 and result.stdout == ""
        assert result.stderr.strip().splitlines()[-1].startswith(f"error: {text}")
