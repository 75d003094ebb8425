"""Synchronous split placement against one-step-off-policy training (``async_training.enable=true``).

Both settings put the trainer and the rollout engine on processes of their own (``trainer.placement=split``,
``trainer.n_gpus_per_node`` trainer + ``trainer.rollout_n_gpus_per_node`` rollout Ray processes, 2 + 2 by
default) and train the same steps on the same prompts, so they see the same number of samples:

- ``sync``: generate, then train, then sync the weights (the on-policy step);
- ``one_step_off``: the rollout processes generate step N+1's batch while the trainer updates on step N
  (``actor_rollout_ref.rollout.calculate_log_probs=true``; the trainer recomputes the old log-probs and
  ``algorithm.rollout_correction.rollout_is=token`` adds the importance weights);
- ``one_step_off_bypass``: the same with ``algorithm.rollout_correction.bypass_mode=true``: the engine's
  log-probs are the old policy, so the trainer skips that forward pass (as the synchronous step does).

Two parts, each a fresh ``rlcore run`` per setting:

``throughput``
    the ``small`` work of ``bench/vs_trl.py`` (``bench/common.py``): median step, the throughput over the
    timed steps (completions and tokens per second of summed step time), the process wall time, how long the
    trainer waited for its batch (``timing_s/wait_prev_gen``) and the overlap share;
``reward``
    the bundled default task (``rlcore run``'s ``arith-cpu`` preset: GRPO on small sums from a biased
    warm-started model, greedy validation every ``--test-freq`` steps): the validation reward curve of both
    settings and their wall time.

    python bench/off_policy.py                       # both parts, 2 + 2 processes
    python bench/off_policy.py --part throughput --steps 6
    python bench/off_policy.py --part reward --reward-steps 40

Prints one JSON object on stdout; progress goes to stderr; bad input gives a one-line ``error: ...`` on
stderr and exit status 2. Target: one-step-off-policy >= 1.3x the synchronous throughput on ``small``, and
its validation reward rises on the default task. Needs ``pip install -e '.[train]'`` (Ray included).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:  # ``python bench/off_policy.py`` has it first already; other loaders may not
    sys.path.insert(0, BENCH_DIR)
import common  # noqa: E402  (the work, the rlcore run, child processes)
from common import BenchError  # noqa: E402

SETTINGS = ("sync", "one_step_off", "one_step_off_bypass")
PARTS = ("throughput", "reward")
#: the overrides that turn one-step-off-policy training on (the importance weights need the engine's log-probs)
ONE_STEP_OFF: dict[str, tuple[str, ...]] = {
    "sync": (),
    "one_step_off": (
        "async_training.enable=true",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "algorithm.rollout_correction.rollout_is=token",
    ),
    "one_step_off_bypass": (
        "async_training.enable=true",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "algorithm.rollout_correction.bypass_mode=true",
    ),
}
#: the validation metric of the default task
VAL_KEY = "val-core/rlcore/arith/reward/mean@1"
TARGET_SPEEDUP = 1.3
log = common.make_log("off_policy")


def split_overrides(setting: str, trainers: int, rollouts: int) -> list[str]:
    """Split placement on ``trainers`` + ``rollouts`` Ray processes, one-step-off-policy for that setting."""
    out = [
        "trainer.executor=ray",
        "trainer.placement=split",
        f"trainer.n_gpus_per_node={trainers}",
        f"trainer.rollout_n_gpus_per_node={rollouts}",
    ]
    return out + list(ONE_STEP_OFF[setting])


def step_figures(rows: list[dict[str, Any]], warmup: int, completions: int) -> dict[str, Any]:
    """Median step, throughput and the one-step-off metrics over the train-step ``rows`` after ``warmup``."""
    steps = common.pool([common.series(rows, "timing_s/step")], warmup, required=True)
    timed = rows[warmup:]
    tokens = sum(float(r.get("perf/total_num_tokens") or 0.0) for r in timed)
    figures: dict[str, Any] = {
        "timed_steps": len(steps),
        "median_step_s": common.median(steps),
        "timed_s": round(sum(steps), 3),
        "completions_per_s": round(completions * len(steps) / sum(steps), 4),
        "tokens_per_s": round(tokens / sum(steps), 2),
        "median_stage_s": {
            name: common.median(values)
            for name, values in common.prefixed_series(timed, "timing_s/", exclude=("step", "outside_worker")).items()
        },
    }
    if any("async_training/staleness" in r for r in rows):
        figures["staleness"] = common.series(rows, "async_training/staleness")
        figures["median_wait_prev_gen_s"] = common.median(common.series(timed, "timing_s/wait_prev_gen"))
        figures["median_overlap_share"] = common.median(common.series(timed, "async_training/overlap_share"), 4)
    return figures


def run_throughput(args: argparse.Namespace, root: Path, env: dict[str, str]) -> dict[str, Any]:
    """The ``small`` work, synchronous and one-step-off; returns the part's JSON section."""
    steps, warmup = common.run_length("small", args.steps, args.warmup)
    facts = common.prepare_work(root, "small")
    completions = common.batch_size("small")
    out: dict[str, Any] = {"size": "small", **common.work_summary("small", facts), "steps": steps, "warmup": warmup}
    for setting in args.settings:
        run_root = root / f"runs-{setting}"
        log_file = root / f"throughput-{setting}.log"
        log(f"throughput {setting}: {steps} steps on {args.trainers}+{args.rollouts} processes (log {log_file})")
        overrides = common.rlcore_overrides(
            root, "small", steps, facts["prompt_tokens_max"], run_root, "ray", args.trainers
        ) + split_overrides(setting, args.trainers, args.rollouts)
        child = common.run_checked(common.rlcore_command(overrides), env, log_file, f"{setting} run")
        figures = step_figures(common.read_metrics(run_root)[1], warmup, completions)
        out[setting] = {"process_wall_s": round(child.wall_s, 1), **figures}
        log(f"throughput {setting}: median step {figures['median_step_s']} s")
    if "sync" in out:
        ratios = {s: out[s]["completions_per_s"] / out["sync"]["completions_per_s"] for s in args.settings[1:]}
        out["throughput_ratio_vs_sync"] = {s: round(r, 3) for s, r in ratios.items()}
        out["target_ratio"] = TARGET_SPEEDUP
        out["target_met"] = {s: r >= TARGET_SPEEDUP for s, r in ratios.items()}
    return out


def run_reward(args: argparse.Namespace, root: Path, env: dict[str, str]) -> dict[str, Any]:
    """The bundled default task, synchronous and one-step-off; returns the part's JSON section."""
    from rlcore_plugin_tasks.arith import cpu_preset

    preset = cpu_preset()
    completions = int(preset["data.train_batch_size"]) * int(preset["actor_rollout_ref.rollout.n"])
    out: dict[str, Any] = {"task": "arith-cpu (rlcore run's default)", "steps": args.reward_steps}
    for setting in args.settings:
        run_root = root / f"reward-{setting}"
        log_file = root / f"reward-{setting}.log"
        log(f"reward {setting}: {args.reward_steps} steps of the default task (log {log_file})")
        overrides = [
            f"trainer.total_training_steps={args.reward_steps}",
            f"trainer.test_freq={args.test_freq}",
            "trainer.progress_bar=false",
            f"trainer.runs_dir={run_root}",
            f"trainer.default_local_dir={run_root / 'ckpt'}",
            *split_overrides(setting, args.trainers, args.rollouts),
        ]
        child = common.run_checked(common.rlcore_command(overrides), env, log_file, f"{setting} default-task run")
        run_dir, train_rows = common.read_metrics(run_root)
        every = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
        curve = [[row["step"], round(row[VAL_KEY], 4)] for row in every if row.get(VAL_KEY) is not None]
        if not curve:
            raise BenchError(f"the {setting} run logged no {VAL_KEY}; see {log_file}")
        out[setting] = {
            "process_wall_s": round(child.wall_s, 1),
            "val_reward_curve": curve,
            "val_reward_rise": round(curve[-1][1] - curve[0][1], 4),
            **step_figures(train_rows, 1, completions),
        }
        log(f"reward {setting}: validation {curve[0][1]} -> {curve[-1][1]}")
    if "sync" in out:
        out["wall_ratio_vs_sync"] = {
            s: round(out["sync"]["process_wall_s"] / out[s]["process_wall_s"], 3) for s in args.settings[1:]
        }
    out["learns"] = {s: out[s]["val_reward_rise"] > 0 for s in args.settings}
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", default="both", help="throughput, reward or both (default both)")
    parser.add_argument(
        "--settings",
        default=",".join(SETTINGS),
        help="comma-separated, sync first when given: sync, one_step_off (old log-probs recomputed, token-level "
        "importance weights), one_step_off_bypass (the engine's log-probs are the old policy) (default all)",
    )
    common.add_run_args(
        parser,
        5,
        "throughput steps per run (default 5)",
        1,
        "first steps of each throughput run left out (default 1)",
    )
    parser.add_argument("--trainers", type=int, default=2, help="trainer processes (default 2)")
    parser.add_argument("--rollouts", type=int, default=2, help="rollout processes (default 2)")
    parser.add_argument("--reward-steps", type=int, default=40, help="default-task steps per run (default 40)")
    parser.add_argument("--test-freq", type=int, default=5, help="default-task validation every N steps (default 5)")
    return parser.parse_args(argv)


def check_args(args: argparse.Namespace) -> list[str]:
    """Validate the command line and the environment; return the parts to run."""
    parts = list(PARTS) if args.part == "both" else [args.part]
    if parts[0] not in PARTS:
        raise BenchError(f"unknown --part {args.part!r}: use throughput, reward or both")
    args.settings = [name.strip() for name in args.settings.split(",") if name.strip()]
    unknown = [name for name in args.settings if name not in SETTINGS]
    if unknown or not args.settings:
        raise BenchError(f"unknown --settings {','.join(unknown) or '(none)'}: use {', '.join(SETTINGS)}")
    if "sync" in args.settings:
        args.settings = ["sync", *(name for name in args.settings if name != "sync")]
    common.check_non_negative(args, "steps", "warmup", "threads")
    for name in ("trainers", "rollouts", "reward_steps", "test_freq"):
        if getattr(args, name) < 1:
            raise BenchError(f"--{name.replace('_', '-')} must be >= 1")
    if "throughput" in parts:
        common.run_length("small", args.steps, args.warmup)
    common.check_modules([("rlcore", "train"), ("torch", "train"), ("pyarrow", "train"), ("ray", "train")])
    return parts


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """The parts asked for; the JSON result without the common header."""
    parts = check_args(args)
    env = common.bench_env(args.threads, RAY_DEDUP_LOGS="0")
    out: dict[str, Any] = {"trainer_processes": args.trainers, "rollout_processes": args.rollouts}
    with common.work_dir("rlcore_off_policy_", args.keep, log) as root:
        if "throughput" in parts:
            out["throughput"] = run_throughput(args, root, env)
        if "reward" in parts:
            out["reward"] = run_reward(args, root, env)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the JSON result (exit 2 with a one-line error on bad input)."""
    args = parse_args(argv)
    return common.run_main("off_policy", args.threads, lambda: benchmark(args))


if __name__ == "__main__":
    sys.exit(main())
