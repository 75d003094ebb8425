"""Synchronous against asynchronous training on the long-tailed task, with pinned lanes (issue 43).

Each mode is a fresh ``rlcore run --preset arith-tail-cpu`` (the bundled sums with heavy-tailed response
budgets: ``rlcore_plugin_tasks.arith_tail``) on split placement, ``--trainers`` + ``--rollouts`` Ray
processes, each pool pinned to cores of its own (``trainer.lane_cpus``, ``--pin``):

- ``sync``: generate, then train, then sync the weights;
- ``one_step_off``: ``async_training.enable=true`` (the rollout pool generates step N+1's batch while the
  trainer updates on step N; token-level importance weights);
- ``colocate_async`` / ``separate_async``: ``trainer.v1.trainer_mode`` (verl's V1 modes), for a build of rlcore
  that has them; ``separate_async_partial``: ``separate_async`` with partial rollout in the lane (16-token
  rounds, ``trainer.v1.separate_async.rounds_ahead`` at its default); the mode table :data:`MODES` lists the
  overrides each mode adds.

Per mode it reports the response tokens per second of summed step time, the median step, the process wall
time, and from Ray's timeline (``ray_kwargs.timeline_json_file``; every worker call is a Ray task named
``<role>.<method>``) each lane's busy intervals: the share of the timed window in which the trainer lane is
busy, the rollout lane is busy, and **both are busy at once** (the overlap the asynchronous modes are for).
The timed window runs from the end of the last warm-up step's actor update to the end of the last update.
It also reports the percentiles of the task's response lengths (its budgets: each response is sampled to
its budget) and the measured per-step response lengths.

    python bench/async_throughput.py                                   # sync, one_step_off; 6 steps each
    python bench/async_throughput.py --modes sync,colocate_async,separate_async --steps 8
    python bench/async_throughput.py --modes sync,separate_async,separate_async_partial --steps 8 --warmup 2
    python bench/async_throughput.py --device cuda --pin none          # a GPU box (2 GPUs: one per pool)

Prints one JSON object on stdout; progress goes to stderr; bad input gives a one-line ``error: ...`` on
stderr and exit status 2. Needs ``pip install -e '.[train]'`` (Ray included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:  # ``python bench/async_throughput.py`` has it first already; other loaders may not
    sys.path.insert(0, BENCH_DIR)
import common  # noqa: E402  (child processes, metrics, the JSON main)
from common import BenchError  # noqa: E402

PRESET = "arith-tail-cpu"
#: the overrides each mode adds to split placement (colocate_async keeps one pool: placement colocated)
MODES: dict[str, tuple[str, ...]] = {
    "sync": (),
    "one_step_off": (
        "async_training.enable=true",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "algorithm.rollout_correction.rollout_is=token",
    ),
    "colocate_async": (
        "trainer.v1.trainer_mode=colocate_async",
        "trainer.v1.partial_rollout_tokens=16",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
    ),
    "separate_async": ("trainer.v1.trainer_mode=separate_async", "actor_rollout_ref.rollout.calculate_log_probs=true"),
    "separate_async_partial": (
        "trainer.v1.trainer_mode=separate_async",
        "trainer.v1.partial_rollout_tokens=16",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
    ),
}
#: modes that keep the rollout on the trainer's processes (one pool: only the trainer lane is pinned)
COLOCATED_MODES = ("colocate_async",)
#: the role of the rollout pool's worker group; every other role's calls are the trainer lane's
ROLLOUT_ROLE = "rollout"
#: the worker method that ends a training step on the trainer lane
UPDATE_METHOD = "update_actor"
log = common.make_log("async_throughput")

Interval = tuple[float, float]


# ------------------------------------------------------------------------------------ busy intervals
def lane_intervals(events: list[dict[str, Any]]) -> dict[str, list[Interval]]:
    """Each lane's call intervals (seconds) from Ray timeline ``events``: tasks named ``<role>.<method>``; the
    ``rollout`` role is the rollout lane, every other role the trainer lane. Also ``update`` (the trainer's
    ``update_actor`` calls). Ray's own tasks (``RayWorker.*``: start-up, pinning) are left out."""
    lanes: dict[str, list[Interval]] = {"trainer": [], "rollout": [], "update": []}
    for event in events:
        category = str(event.get("cat", ""))
        if event.get("ph") != "X" or not category.startswith("task::"):
            continue
        role, _, method = category.removeprefix("task::").partition(".")
        if not method or role == "RayWorker":
            continue
        start = float(event["ts"]) / 1e6
        span = (start, start + float(event["dur"]) / 1e6)
        lanes[ROLLOUT_ROLE if role == ROLLOUT_ROLE else "trainer"].append(span)
        if method == UPDATE_METHOD:
            lanes["update"].append(span)
    return {lane: merge(spans) for lane, spans in lanes.items()}


def merge(spans: list[Interval]) -> list[Interval]:
    """``spans`` as sorted disjoint intervals (overlapping ones joined: the ranks of one call; touching ones kept
    apart: consecutive calls)."""
    out: list[Interval] = []
    for start, end in sorted(spans):
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def covered(spans: list[Interval], window: Interval) -> float:
    """Seconds of ``window`` that the disjoint ``spans`` cover."""
    low, high = window
    return sum(max(0.0, min(end, high) - max(start, low)) for start, end in spans)


def intersect(first: list[Interval], second: list[Interval]) -> list[Interval]:
    """The intervals where both disjoint, sorted lists are busy."""
    out, i, j = [], 0, 0
    while i < len(first) and j < len(second):
        low, high = max(first[i][0], second[j][0]), min(first[i][1], second[j][1])
        if low < high:
            out.append((low, high))
        if first[i][1] < second[j][1]:
            i += 1
        else:
            j += 1
    return out


def busy_figures(events: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """The lanes' busy shares of the timed window and of each timed step (median) from timeline ``events``."""
    lanes = lane_intervals(events)
    updates = lanes["update"]
    if len(updates) <= warmup:
        raise BenchError(f"the timeline holds {len(updates)} actor updates, not more than the {warmup} warm-up steps")
    both = intersect(lanes["trainer"], lanes["rollout"])
    first = min(spans[0][0] for spans in (lanes["trainer"], lanes["rollout"]) if spans)
    bounds = [first, *(end for _, end in updates)]  # a step ends with its actor update
    steps = list(zip(bounds[warmup:-1], bounds[warmup + 1 :]))
    window = (steps[0][0], steps[-1][1])
    length = window[1] - window[0]

    def share(spans: list[Interval], span: Interval) -> float:
        return covered(spans, span) / (span[1] - span[0])

    return {
        "window_s": round(length, 3),
        "trainer_busy_share": round(share(lanes["trainer"], window), 4),
        "rollout_busy_share": round(share(lanes["rollout"], window), 4),
        "both_busy_share": round(share(both, window), 4),
        "both_busy_share_per_step": [round(share(both, step), 4) for step in steps],
    }


# ------------------------------------------------------------------------------------------ the runs
def pin_overrides(pin: str, mode: str) -> list[str]:
    """``trainer.lane_cpus`` for ``--pin`` (``auto``: this process's cores, first half for the trainer and the
    rest for the rollout; ``none``; or ``TRAINER:ROLLOUT`` CPU lists). A colocated mode pins its one pool to
    both lists."""
    if pin == "none":
        return []
    if pin == "auto":
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2:
            raise BenchError("--pin auto needs 2 usable cores; use --pin none")
        half = len(cores) // 2
        trainer, rollout = ",".join(map(str, cores[:half])), ",".join(map(str, cores[half:]))
    else:
        trainer, _, rollout = pin.partition(":")
        if not trainer or not rollout:
            raise BenchError(f"--pin {pin!r}: use auto, none or TRAINER:ROLLOUT CPU lists such as 0-3:4-7")
    if mode in COLOCATED_MODES:
        return [f"trainer.lane_cpus.trainer='{trainer},{rollout}'"]
    return [f"trainer.lane_cpus.trainer='{trainer}'", f"trainer.lane_cpus.rollout='{rollout}'"]


def sync_step_override(mode: str) -> list[str]:
    """separate_async's ``parameter_sync_step`` for the preset's batch: verl's invariant makes it
    ``data.train_batch_size / actor.ppo_mini_batch_size`` (one weight sync per step), which its default of 4 is
    not for this task."""
    if not mode.startswith("separate_async"):
        return []
    from rlcore_plugin_tasks.arith_tail import cpu_preset

    preset = cpu_preset()
    step = int(preset["data.train_batch_size"]) // int(preset["actor_rollout_ref.actor.ppo_mini_batch_size"])
    return [f"trainer.v1.separate_async.parameter_sync_step={step}"]


def mode_overrides(args: argparse.Namespace, mode: str, run_root: Path, timeline: Path) -> list[str]:
    """The ``rlcore run`` arguments of ``mode``: the preset, split placement (colocated for a colocated mode),
    the pinning, the run's length and outputs, and ``--extra``."""
    placement = (
        ["trainer.placement=colocated", f"trainer.n_gpus_per_node={args.trainers}"]
        if mode in COLOCATED_MODES
        else [
            "trainer.placement=split",
            f"trainer.n_gpus_per_node={args.trainers}",
            f"trainer.rollout_n_gpus_per_node={args.rollouts}",
        ]
    )
    return [
        "--preset",
        PRESET,
        "trainer.executor=ray",
        f"trainer.device={args.device}",
        *placement,
        *pin_overrides(args.pin, mode),
        *MODES[mode],
        *sync_step_override(mode),
        f"trainer.total_training_steps={args.steps}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.save_final_model=false",
        "trainer.report=false",
        "trainer.progress_bar=false",
        "trainer.logger=[console]",
        f"trainer.runs_dir={run_root}",
        f"trainer.default_local_dir={run_root / 'ckpt'}",
        f"ray_kwargs.timeline_json_file={timeline}",
        *args.extra,
    ]


def step_figures(rows: list[dict[str, Any]], warmup: int, responses: int) -> dict[str, Any]:
    """Median step, response tokens per second of summed step time and the measured response lengths over the
    train-step ``rows`` after ``warmup``."""
    steps = common.pool([common.series(rows, "timing_s/step")], warmup, required=True)
    timed = rows[warmup:]
    tokens = sum(float(r["response_length/mean"]) * responses for r in timed)
    return {
        "timed_steps": len(steps),
        "median_step_s": common.median(steps),
        "timed_s": round(sum(steps), 3),
        "response_tokens": round(tokens),
        "tokens_per_s": round(tokens / sum(steps), 2),
        "response_length_mean_per_step": [round(float(r["response_length/mean"]), 2) for r in timed],
        "response_length_max_per_step": [int(r["response_length/max"]) for r in timed],
        "median_gen_s": common.median(common.series(timed, "timing_s/gen")),
        "median_update_actor_s": common.median(common.series(timed, "timing_s/update_actor")),
        "median_wait_prev_gen_s": common.median(common.series(timed, "timing_s/wait_prev_gen")),
    }


def length_percentiles() -> dict[str, Any]:
    """The percentiles of the task's response lengths (the train rows' budgets; each response is sampled to its
    budget) and the distribution's parameters."""
    from rlcore_plugin_tasks import arith_tail

    lengths = sorted(row["extra_info"][arith_tail.BUDGET_KEY] for row in arith_tail.rows("train"))

    def at(p: float) -> int:
        return int(lengths[min(len(lengths) - 1, int(p / 100 * len(lengths)))])

    return {
        "distribution": f"Pareto(alpha={arith_tail.PARETO_ALPHA}, scale={arith_tail.MIN_BUDGET}), capped at "
        f"{arith_tail.MAX_BUDGET}",
        "rows": len(lengths),
        "mean": round(statistics.mean(lengths), 2),
        **{f"p{p}": at(p) for p in (10, 50, 75, 90, 95, 99)},
        "max": lengths[-1],
    }


def run_mode(args: argparse.Namespace, root: Path, env: dict[str, str], mode: str, responses: int) -> dict[str, Any]:
    """One fresh run of ``mode``; its JSON section."""
    run_root, timeline, log_file = root / f"runs-{mode}", root / f"timeline-{mode}.json", root / f"{mode}.log"
    overrides = mode_overrides(args, mode, run_root, timeline)
    log(f"{mode}: {args.steps} steps (log {log_file})")
    child = common.run_checked(common.rlcore_command(overrides), env, log_file, f"{mode} run")
    figures = step_figures(common.read_metrics(run_root)[1], args.warmup, responses)
    if not timeline.is_file():
        raise BenchError(f"the {mode} run wrote no Ray timeline at {timeline}; see {log_file}")
    busy = busy_figures(json.loads(timeline.read_text()), args.warmup)
    log(f"{mode}: {figures['tokens_per_s']} tokens/s, both lanes busy {busy['both_busy_share']:.1%} of the window")
    return {"process_wall_s": round(child.wall_s, 1), "overrides": overrides, **figures, **busy}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--modes",
        default="sync,one_step_off",
        help=f"comma-separated modes, sync first when given: {', '.join(MODES)} (default sync,one_step_off)",
    )
    common.add_run_args(parser, 6, "steps per run (default 6)", 1, "first steps of each run left out (default 1)")
    parser.add_argument("--trainers", type=int, default=1, help="trainer processes (default 1)")
    parser.add_argument("--rollouts", type=int, default=1, help="rollout processes (default 1)")
    parser.add_argument(
        "--pin", default="auto", help="auto (half the cores each), none, or TRAINER:ROLLOUT such as 0-3:4-7"
    )
    parser.add_argument("--device", default="auto", help="trainer.device: auto, cpu or cuda (default auto)")
    parser.add_argument(
        "--extra", action="append", default=[], help="one more key=value override for every run (repeatable)"
    )
    return parser.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    """Validate the command line and the environment."""
    args.modes = [name.strip() for name in args.modes.split(",") if name.strip()]
    unknown = [name for name in args.modes if name not in MODES]
    if unknown or not args.modes:
        raise BenchError(f"unknown --modes {','.join(unknown) or '(none)'}: use {', '.join(MODES)}")
    if "sync" in args.modes:
        args.modes = ["sync", *(name for name in args.modes if name != "sync")]
    common.check_non_negative(args, "steps", "warmup", "threads")
    if args.steps <= args.warmup:
        raise BenchError(f"--steps ({args.steps}) must be larger than --warmup ({args.warmup})")
    for name in ("trainers", "rollouts"):
        if getattr(args, name) < 1:
            raise BenchError(f"--{name} must be >= 1")
    if args.device not in ("auto", "cpu", "cuda"):
        raise BenchError(f"--device {args.device!r}: use auto, cpu or cuda")
    pin_overrides(args.pin, "sync")
    common.check_modules([("rlcore", "train"), ("torch", "train"), ("ray", "train"), ("rlcore_plugin_tasks", "train")])


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """Every mode asked for; the JSON result without the common header."""
    check_args(args)
    from rlcore_plugin_tasks.arith_tail import cpu_preset

    preset = cpu_preset()
    responses = int(preset["data.train_batch_size"]) * int(preset["actor_rollout_ref.rollout.n"])
    env = common.bench_env(args.threads, RAY_DEDUP_LOGS="0")
    out: dict[str, Any] = {
        "task": PRESET,
        "responses_per_step": responses,
        "response_lengths": length_percentiles(),
        "trainer_processes": args.trainers,
        "rollout_processes": args.rollouts,
        "pin": args.pin,
        "device": args.device,
        "steps": args.steps,
        "warmup": args.warmup,
    }
    with common.work_dir("rlcore_async_throughput_", args.keep, log) as root:
        for mode in args.modes:
            out[mode] = run_mode(args, root, env, mode, responses)
    if "sync" in out:
        out["tokens_per_s_vs_sync"] = {
            mode: round(out[mode]["tokens_per_s"] / out["sync"]["tokens_per_s"], 3) for mode in args.modes[1:]
        }
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the JSON result (exit 2 with a one-line error on bad input)."""
    args = parse_args(argv)
    return common.run_main("async_throughput", args.threads, lambda: benchmark(args))


if __name__ == "__main__":
    sys.exit(main())
