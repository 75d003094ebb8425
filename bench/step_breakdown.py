"""Where an rlcore GRPO step goes: time per stage, worker time per method, and the share outside the workers.

For each executor setting (``local``; ``ray`` with 1 worker process; ``ray`` with 2 worker processes,
``trainer.executor=ray trainer.n_gpus_per_node=2`` on CPU) this runs a short ``rlcore run`` of the
``bench/vs_trl.py`` work (same model sizes, prompts, reward and settings, built by ``bench/common.py``) as
a fresh process and reads the per-step metrics the trainer itself writes to the run's ``metrics.jsonl``:

- ``timing_s/<stage>``: the controller's stage timers (``gen``, ``reward``, ``old_log_prob``, ``ref``,
  ``adv``, ``update_actor``, ``update_weights``) and ``timing_s/step``;
- ``timing_worker_s/<method>``: seconds the workers spent inside each worker method during the step,
  timed in the worker (local: around the worker's bound method; ray: inside the Ray actor, the slowest
  rank's time per call);
- ``timing_s/outside_worker`` (step time minus the sum of the worker times) and
  ``perf/outside_worker_share`` (that / step time): reward scoring, advantages, Ray submission and
  (de)serialisation, chunking and concatenating batches, bookkeeping.

Medians are over the steps after ``--warmup``. Nothing is patched: the numbers are rlcore's own.

    python bench/step_breakdown.py                              # small, local + ray1 + ray2, 4 steps
    python bench/step_breakdown.py --size tiny --steps 12 --executors local,ray1

Prints one JSON object on stdout; progress goes to stderr; bad input gives a one-line ``error: ...`` on
stderr and exit status 2. Targets (on ``small``): outside-worker share
< 5 % of the step with the local executor, < 15 % with Ray. Needs ``pip install -e '.[train]'``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:  # ``python bench/step_breakdown.py`` has it first already; other loaders may not
    sys.path.insert(0, BENCH_DIR)
import common  # noqa: E402  (shared with vs_trl.py: the work, the rlcore run, child processes)
from common import BenchError  # noqa: E402

#: executor settings: name -> (trainer.executor, worker processes = trainer.n_gpus_per_node)
EXECUTORS: dict[str, tuple[str, int]] = {"local": ("local", 1), "ray1": ("ray", 1), "ray2": ("ray", 2)}
#: controller stage (``timing_s/<stage>``) -> the worker methods it calls (``timing_worker_s/<method>``)
STAGE_METHODS: dict[str, tuple[str, ...]] = {
    "gen": ("generate_sequences",),
    "old_log_prob": ("compute_log_prob",),
    "ref": ("compute_ref_log_prob",),
    "values": ("compute_values",),
    "update_critic": ("update_critic",),
    "update_actor": ("update_actor",),
    "update_weights": ("sync_weights", "export_weights", "receive_weights"),
}
#: largest outside-worker share of the step, per executor; binding on this size only
TARGET_SHARE: dict[str, float] = {"local": 0.05, "ray": 0.15}
TARGET_SIZE = "small"
log = common.make_log("step_breakdown")


def analyse(rows: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """Medians of the stage, worker and outside-worker figures over ``rows`` (train steps) after ``warmup``."""
    if rows and "perf/outside_worker_share" not in rows[0]:
        raise BenchError(
            "the run's metrics have no perf/outside_worker_share: this rlcore does not report "
            "worker time (timing_worker_s/*); install the current core"
        )
    timed = rows[warmup:]
    steps = common.pool([common.series(rows, "timing_s/step")], warmup, required=True)
    stages = common.prefixed_series(timed, "timing_s/", exclude=("step", "outside_worker"))
    workers = common.prefixed_series(timed, "timing_worker_s/")
    worker_total = [sum(values) for values in zip(*workers.values())] or [0.0] * len(timed)
    outside = common.series(timed, "timing_s/outside_worker")
    overhead = {
        stage: common.median(
            [s - sum(workers[m][i] for m in methods if m in workers) for i, s in enumerate(stages[stage])]
        )
        for stage, methods in STAGE_METHODS.items()
        if stage in stages and any(m in workers for m in methods)
    }
    return {
        "timed_steps": len(steps),
        "median_step_s": common.median(steps),
        "median_stage_s": {name: common.median(values) for name, values in stages.items()},
        "median_worker_s": {name: common.median(values) for name, values in workers.items()},
        "median_worker_total_s": common.median(worker_total),
        "median_outside_worker_s": common.median(outside),
        "median_outside_worker_share": common.median(common.series(timed, "perf/outside_worker_share"), 4),
        "pooled_outside_worker_share": round(sum(outside) / sum(steps), 4),
        "median_stage_overhead_s": overhead,
        "old_log_prob_pass_skipped": "old_log_prob" not in stages,
        "median_weight_sync_reported_s": common.median(common.series(timed, "actor/weight_sync_s")),
    }


def run_setting(
    name: str, args: argparse.Namespace, work: Path, prompt_len: int, env: dict[str, str]
) -> dict[str, Any]:
    """One fresh ``rlcore run`` of executor setting ``name``; returns its JSON section."""
    executor, workers = EXECUTORS[name]
    steps, warmup = common.run_length(args.size, args.steps, args.warmup)
    run_root = work / f"runs-{name}"
    log_file = work / f"{name}.log"
    log(f"{name}: {steps} steps (log {log_file})")
    overrides = common.rlcore_overrides(work, args.size, steps, prompt_len, run_root, executor, workers)
    child = common.run_checked(common.rlcore_command(overrides), env, log_file, f"{name} run")
    result = analyse(common.read_metrics(run_root)[1], warmup)
    share = result["median_outside_worker_share"]
    log(f"{name}: median step {result['median_step_s']:.4f} s, outside the workers {share:.1%}")
    return {
        "executor": executor,
        "worker_processes": workers,
        "steps": steps,
        "process_wall_s": round(child.wall_s, 1),
        "driver_peak_rss_mb": round(child.peak_rss_mb, 1),
        **result,
        "target_outside_share": TARGET_SHARE[executor],
        "within_target": share < TARGET_SHARE[executor],
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="small", help="tiny or small (default small)")
    common.add_run_args(
        parser,
        4,
        "steps per run (default 4; 0 = the size's default: tiny 20, small 5)",
        1,
        "first steps of each run left out of the medians (default 1)",
    )
    parser.add_argument(
        "--executors",
        default="local,ray1,ray2",
        help="comma-separated: local, ray1 (ray, 1 worker), ray2 (ray, 2 workers)",
    )
    return parser.parse_args(argv)


def check_args(args: argparse.Namespace) -> list[str]:
    """Validate the command line and the environment; return the executor settings to run."""
    common.check_sizes(args.size, allow_both=False)
    names = [n.strip() for n in args.executors.split(",") if n.strip()]
    unknown = [n for n in names if n not in EXECUTORS]
    if unknown or not names:
        raise BenchError(f"unknown --executors {','.join(unknown) or args.executors!r}: use local, ray1, ray2")
    common.check_non_negative(args, "steps", "warmup", "threads")
    common.run_length(args.size, args.steps, args.warmup)
    needed = [("rlcore", "train"), ("torch", "train"), ("pyarrow", "train")]
    common.check_modules(needed + ([("ray", "train")] if any(EXECUTORS[n][0] == "ray" for n in names) else []))
    return names


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """Every executor setting's run; the JSON result without the common header."""
    names = check_args(args)
    env = common.bench_env(args.threads, RAY_DEDUP_LOGS="0")
    with common.work_dir("rlcore_step_breakdown_", args.keep, log) as root:
        log(f"{args.size}: building model, tokenizer and data in {root}")
        facts = common.prepare_work(root, args.size)
        settings = {name: run_setting(name, args, root, facts["prompt_tokens_max"], env) for name in names}
    steps, warmup = common.run_length(args.size, args.steps, args.warmup)
    return {
        "size": args.size,
        **common.work_summary(args.size, facts),
        "steps_per_run": steps,
        "warmup_steps_excluded": warmup,
        "target_outside_share": TARGET_SHARE,
        "targets_met": all(s["within_target"] for s in settings.values()) if args.size == TARGET_SIZE else None,
        "settings": settings,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the JSON result (exit 2 with a one-line error on bad input)."""
    args = parse_args(argv)
    return common.run_main("step_breakdown", args.threads, lambda: benchmark(args))


if __name__ == "__main__":
    sys.exit(main())
