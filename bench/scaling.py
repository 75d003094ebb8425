"""How rlcore's step time grows with the batch and shrinks with Ray worker processes, on the ``small`` model.

Two sweeps of short ``rlcore run`` s of the ``bench/vs_trl.py`` work (``bench/common.py``: the ``small``
model, its prompts, reward and GRPO settings, 4 generations per prompt), each run a fresh process with the
colocated Ray executor:

- batch size: ``--prompts`` prompts per step (default 2, 4, 8, 16, i.e. 8 to 64 completions) on
  ``--batch-workers`` worker process(es) (default 1);
- worker processes: ``trainer.n_gpus_per_node`` = ``--workers`` (default 1, 2, 4) at ``--workers-prompts``
  prompts per step (default 8, the ``small`` work's own batch); the batch is split over the ranks.

For each run: the median step time after ``--warmup`` steps, the median per stage (``gen``,
``update_actor``, ...), seconds per completion, and the machine's 1-minute load average before and after,
because on a machine with fewer free cores than processes the processes share cores and do not scale.

    python bench/scaling.py                         # both sweeps, 3 steps per run, 1 warm-up step dropped
    python bench/scaling.py --sweep workers --workers 1,2 --steps 4

Prints one JSON object on stdout; progress goes to stderr; bad input gives a one-line ``error: ...`` on
stderr and exit status 2. Needs ``pip install -e '.[train]'`` (Ray included).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:  # ``python bench/scaling.py`` has it first already; other loaders may not
    sys.path.insert(0, BENCH_DIR)
import common  # noqa: E402  (the work, the rlcore run, child processes)
from common import BenchError  # noqa: E402

SIZE = "small"
SWEEPS = ("batch", "workers")
log = common.make_log("scaling")


def int_list(text: str, option: str) -> list[int]:
    """``"1,2,4"`` as ``[1, 2, 4]``; an error naming ``option`` unless every entry is a positive integer."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise BenchError(f"{option} must be comma-separated positive integers, got {text!r}")
    return values


def run_point(
    args: argparse.Namespace, root: Path, facts: dict[str, Any], env: dict[str, str], prompts: int, workers: int
) -> dict[str, Any]:
    """One fresh run of ``prompts`` prompts per step on ``workers`` Ray processes; its JSON row."""
    generations = common.SIZES[SIZE]["generations"]
    completions = prompts * generations
    if completions % workers:
        raise BenchError(f"{completions} completions per step cannot be split over {workers} worker processes")
    micro = completions // workers
    name = f"p{prompts}-w{workers}"
    run_root = root / f"runs-{name}"
    log_file = root / f"{name}.log"
    overrides = common.rlcore_overrides(root, SIZE, args.steps, facts["prompt_tokens_max"], run_root, "ray", workers)
    overrides += [
        f"data.train_batch_size={prompts}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
    ]
    load_before = os.getloadavg()[0]
    log(f"{name}: {prompts} prompts x {generations} on {workers} process(es), {args.steps} steps (log {log_file})")
    child = common.run_checked(common.rlcore_command(overrides), env, log_file, f"{name} run")
    rows = common.read_metrics(run_root)[1]
    steps = common.pool([common.series(rows, "timing_s/step")], args.warmup, required=True)
    stages = common.prefixed_series(rows[args.warmup :], "timing_s/", exclude=("step", "outside_worker"))
    median_step = common.median(steps)
    log(f"{name}: median step {median_step} s")
    return {
        "prompts": prompts,
        "completions": completions,
        "worker_processes": workers,
        "timed_steps": len(steps),
        "median_step_s": median_step,
        "s_per_completion": round((median_step or 0.0) / completions, 4),
        "median_stage_s": {stage: common.median(values) for stage, values in stages.items()},
        "process_wall_s": round(child.wall_s, 1),
        "loadavg_1m_before": round(load_before, 2),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", default="both", help="batch, workers or both (default both)")
    common.add_run_args(parser, 3, "steps per run (default 3)", 1, "first steps of each run left out (default 1)")
    parser.add_argument("--prompts", default="2,4,8,16", help="batch sweep: prompts per step (default 2,4,8,16)")
    parser.add_argument("--batch-workers", type=int, default=1, help="batch sweep: worker processes (default 1)")
    parser.add_argument("--workers", default="1,2,4", help="worker sweep: processes (default 1,2,4)")
    parser.add_argument("--workers-prompts", type=int, default=8, help="worker sweep: prompts per step (default 8)")
    return parser.parse_args(argv)


def check_args(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """Validate the command line and the environment; return the runs as ``(sweep, prompts, workers)``."""
    sweeps = list(SWEEPS) if args.sweep == "both" else [args.sweep]
    if sweeps[0] not in SWEEPS:
        raise BenchError(f"unknown --sweep {args.sweep!r}: use batch, workers or both")
    common.check_non_negative(args, "steps", "warmup", "threads")
    if args.steps <= args.warmup:
        raise BenchError(f"--steps ({args.steps}) must be larger than --warmup ({args.warmup})")
    if args.batch_workers < 1 or args.workers_prompts < 1:
        raise BenchError("--batch-workers and --workers-prompts must be >= 1")
    runs: list[tuple[str, int, int]] = []
    if "batch" in sweeps:
        runs += [("batch", prompts, args.batch_workers) for prompts in int_list(args.prompts, "--prompts")]
    if "workers" in sweeps:
        runs += [("workers", args.workers_prompts, workers) for workers in int_list(args.workers, "--workers")]
    common.check_modules([("rlcore", "train"), ("torch", "train"), ("pyarrow", "train"), ("ray", "train")])
    return runs


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """Every run of the sweeps; the JSON result without the common header. A point measured by both sweeps
    (same prompts and processes) is run once."""
    runs = check_args(args)
    env = common.bench_env(args.threads, RAY_DEDUP_LOGS="0")
    measured: dict[tuple[int, int], dict[str, Any]] = {}
    out: dict[str, Any] = {"size": SIZE, "steps_per_run": args.steps, "warmup_steps_excluded": args.warmup}
    with common.work_dir("rlcore_scaling_", args.keep, log) as root:
        log(f"{SIZE}: building model, tokenizer and data in {root}")
        facts = common.prepare_work(root, SIZE)
        out.update(common.work_summary(SIZE, facts))
        for sweep, prompts, workers in runs:
            if (prompts, workers) not in measured:
                measured[prompts, workers] = run_point(args, root, facts, env, prompts, workers)
            out.setdefault(f"by_{sweep}", []).append(measured[prompts, workers])
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the JSON result (exit 2 with a one-line error on bad input)."""
    args = parse_args(argv)
    return common.run_main("scaling", args.threads, lambda: benchmark(args))


if __name__ == "__main__":
    sys.exit(main())
