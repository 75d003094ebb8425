"""PRIME on the bundled CPU task: the greedy validation reward at step 0 and at the end, next to GRPO's.

Runs ``rlcore run --preset prime`` (and, unless ``--no-grpo``, the plain default ``rlcore run``, GRPO) in
fresh processes on the bundled task (its warm-started model ships with rlcore) and prints one
JSON object: per algorithm the validation curve ``val-core/rlcore/arith/reward/mean@1`` by step, its first
and last value, and for PRIME the PRM's ``reward_model/dpo_loss`` and ``reward_model/dpo_acc`` per step.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

VAL_KEY = "val-core/rlcore/arith/reward/mean@1"


def one_run(name: str, extra: list[str], root: Path, threads: int, log: Any) -> dict[str, Any]:
    """``rlcore run *extra`` in ``root/name``; its validation curve (and PRM metrics)."""
    cwd = root / name
    cwd.mkdir()
    log(f"{name}: rlcore run {' '.join(extra)}")
    command = [sys.executable, "-m", "rlcore", "run", *extra, "trainer.progress_bar=false"]
    env = common.bench_env(threads)
    result = common.run_checked(["env", "-C", str(cwd), *command], env, root / f"{name}.log", name)
    run_dir, _ = common.read_metrics(cwd / "outputs")
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]  # with the step-0 validation row
    val = {int(row["step"]): round(row[VAL_KEY], 4) for row in rows if row.get(VAL_KEY) is not None}
    out: dict[str, Any] = {"wall_s": round(result.wall_s, 1), "val_by_step": val}
    steps = sorted(val)
    out["val_first"], out["val_last"] = val[steps[0]], val[steps[-1]]
    for key in ("reward_model/dpo_loss", "reward_model/dpo_acc"):
        values = [round(row[key], 4) for row in rows if row.get(key) is not None]
        if values:
            out[key] = values
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="training steps (default 40, the default run's)")
    parser.add_argument("--prm-lr", type=float, default=1e-5, help="reward_model.optim.lr (default 1e-5)")
    parser.add_argument("--no-grpo", action="store_true", help="skip the GRPO reference run")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the runs (default 1)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    log = common.make_log("prime")

    def body() -> dict[str, Any]:
        if args.steps < 1:
            raise common.BenchError("--steps must be >= 1")
        steps = f"trainer.total_training_steps={args.steps}"
        with common.work_dir("rlcore-prime-", args.keep, log) as root:
            runs = {
                "prime": one_run(
                    "prime",
                    ["--preset", "prime", f"reward_model.optim.lr={args.prm_lr}", steps],
                    root,
                    args.threads,
                    log,
                )
            }
            if not args.no_grpo:
                runs["grpo"] = one_run("grpo", [steps], root, args.threads, log)
        return {"steps": args.steps, "prm_lr": args.prm_lr, "runs": runs}

    return common.run_main("prime_default", args.threads, body)


if __name__ == "__main__":
    sys.exit(main())
