"""``bench/async_curves.py``: its ``--quick`` run (real ``rlcore run`` processes, sync and ``colocate_async`` one
batch ahead) gives the JSON the README table is made from and an off-policy async run; its statistics and
verdict on hand-made curves; its errors. The learning figures themselves come from the full run
(``bench/README.md``), never asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "async_curves.py"


def run_bench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python bench/async_curves.py ARGS`` in ``cwd``."""
    return subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=900, cwd=cwd, check=False
    )


def test_quick_run_trains_sync_and_an_off_policy_async_run(tmp_path: Path) -> None:
    png = tmp_path / "figures" / "quick.png"
    result = run_bench("--quick", "--png", str(png), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout)
    assert out["benchmark"] == "async_curves" and out["preset"] == "arith-cpu"
    assert (out["steps"], out["eval_every"], out["seeds"]) == (4, 2, [1])
    configs = out["configs"]
    assert list(configs) == ["sync", "colocate_async_s1"]
    for name, config in configs.items():
        assert config["val"]["steps"] == [0, 2, 4], name
        assert config["train"]["steps"] == [1, 2, 3, 4], name
        assert set(config["final_val_per_seed"]) == {"1"} and 0 <= config["final_val"]["mean"] <= 1
        assert config["wall_s"]["mean"] > 0
    # sync trains what it generated; one batch ahead, steps 2-4 train groups generated one version earlier
    assert configs["sync"]["staleness_worst_max_peak"] == 0
    assert configs["colocate_async_s1"]["staleness_worst_max_mean_per_seed"]["1"] == 0.75
    assert configs["colocate_async_s1"]["staleness_worst_max_peak"] == 1
    assert "verdict" not in configs["sync"]
    verdict = configs["colocate_async_s1"]["verdict"]
    assert set(verdict) == {"final_minus_sync", "tolerance", "reaches_sync"}
    assert verdict["tolerance"] == out["validation_prompt_share"] == 0.0125  # one seed: no std, one prompt of 80
    assert "colocate_async" in " ".join(out["overrides"]["colocate_async_s1"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out["png"] == str(png)


def test_final_reward_and_verdict(bench_script: Callable[[str], ModuleType]) -> None:
    bench = bench_script("async_curves")
    assert bench.final_reward({"0": 0.1, "10": 0.9, "2": 0.5, "4": 0.7}, 2) == pytest.approx(0.8)
    runs = {
        seed: {
            "val": {"0": 0.2, "1": a, "2": b},
            "train": {"1": 0.3, "2": 0.4 + seed / 100},
            "wall_s": 10.0 + seed,
            "staleness_worst_max_mean": 0.0,
            "staleness_worst_max_peak": 0.0,
            "evicted_groups": 0,
        }
        for seed, (a, b) in {1: (0.8, 0.9), 2: (0.9, 1.0), 3: (0.6, 0.8)}.items()
    }
    sync = bench.summarise_config(runs, window=1, threshold=0.85, steps=2)
    assert sync["final_val_per_seed"] == {"1": 0.9, "2": 1.0, "3": 0.8}
    assert sync["final_val"]["mean"] == 0.9 and sync["final_val"]["std"] == 0.1
    assert sync["val"]["steps_to_threshold"]["per_seed"] == {"1": 2, "2": 1, "3": None}
    assert sync["seeds_give_different_curves"] and sync["wall_s"]["mean"] == 12.0
    behind = bench.summarise_config(
        {seed: dict(run, val={k: v - 0.25 for k, v in run["val"].items()}) for seed, run in runs.items()}, 1, 0.85, 2
    )
    assert bench.compare_with_sync(behind, sync, 0.0125) == {
        "final_minus_sync": -0.25,
        "tolerance": 0.2,
        "reaches_sync": False,
    }
    assert bench.compare_with_sync(sync, sync, 0.0125)["reaches_sync"]
    same = bench.summarise_config({1: runs[1], 2: runs[1]}, 1, 0.85, 2)
    assert not same["seeds_give_different_curves"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--configs", "sync,colocate_async_s9"], "error: unknown --configs colocate_async_s9: use sync, "),
        (["--configs", "colocate_async_s1,sync"], "error: --configs must start with sync and name each"),
        (["--seeds", "0"], "error: --seeds must be >= 1"),
        (["--task", "gsm8k"], "error: unknown --task 'gsm8k': use arith or arith-chain"),
        (["--reach", "1.5"], "error: --reach must be in (0, 1]"),
    ],
)
def test_bad_command_lines_give_one_line_errors(args: list[str], message: str, tmp_path: Path) -> None:
    result = run_bench(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(message)
    assert result.stdout == ""
