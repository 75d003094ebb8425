"""Learning curves of the asynchronous trainer modes against ``sync`` on the bundled task (issue 43).

Every configuration trains the task a bare ``rlcore run`` trains (``--task arith``: the ``arith-cpu`` preset,
GRPO on small sums from a warm-started model) for the same ``--steps``, at ``--seeds`` seeds, with the per-seed
prompt order, seeds and validation of ``bench/vs_trl.py --curve`` (``learning_curve.rlcore_curve_overrides``:
``trainer.seed``, ``rollout.seed``, ``actor.data_loader_seed`` and a training file in the seed's order, so
step ``t`` of every configuration of one seed draws the same prompts). The configurations (:data:`CONFIGS`):

- ``sync``: generate, train, sync the weights;
- ``colocate_async_s1`` / ``colocate_async_s4``: ``trainer.v1.trainer_mode=colocate_async`` with 1 or 4
  batches issued ahead (``num_warmup_batches``) and the bound that admits them
  (``trainer.v1.sampler.max_off_policy_threshold`` = k + 1), so from step k + 1 on every batch was generated
  k versions before the one it trains;
- ``colocate_async_s4_partial``: the same with partial rollout (``trainer.v1.partial_rollout_tokens=2``);
- ``separate_async_s1``: the rollout lane on a process of its own (``trainer.placement=split``,
  ``trainer.executor=ray``, 1 + 1 processes), 1 batch ahead, bound 2.

Every asynchronous configuration takes the engine's log-probs (``actor_rollout_ref.rollout.calculate_log_probs``)
and corrects the lag with token-level importance weights (``algorithm.rollout_correction.rollout_is=token``).

Per configuration it prints the greedy validation reward per step (mean/std/min/max across seeds, every seed's
curve), the sampled training reward per step the same way, the final validation reward per seed (the mean of
its last ``--final-window`` validations), the steps each seed takes to reach ``--reach`` (0.9) of ``sync``'s
mean final reward, the process wall time, the staleness the runs really had (the mean over steps of
``training/off_policy/trajectory_staleness_worst/max``, and the groups the bound evicted) and whether the seeds
gave different curves. The criterion, fixed before any run: a configuration **reaches sync** when its mean final
reward is at least sync's minus the tolerance, ``max(2 x the larger of the two seed standard deviations, one
validation prompt)`` (one prompt: 1 / the validation rows, the resolution of the reward). A PNG (default
``bench/figures/async_curves_<task>.png``) shows both rewards against the step, one line per configuration
with its min-max band across seeds (the plot of ``vs_trl.py --curve``: ``learning_curve.draw_curves``).

    python bench/async_curves.py                                   # 4 configurations x 3 seeds, 40 steps
    python bench/async_curves.py --configs sync,colocate_async_s4_partial --seeds 3
    python bench/async_curves.py --quick                           # sync and colocate_async_s1, 1 seed, 4 steps

Prints one JSON object on stdout; progress goes to stderr; bad input gives a one-line ``error: ...`` on stderr
and exit status 2. Needs ``pip install -e '.[train]'`` (Ray for ``separate_async``, matplotlib).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:  # ``python bench/async_curves.py`` has it first already; other loaders may not
    sys.path.insert(0, BENCH_DIR)
import common  # noqa: E402  (child processes, the JSON main)
import learning_curve  # noqa: E402  (per-seed data and overrides, statistics, the plot)
from common import BenchError  # noqa: E402

#: the off-policy correction every asynchronous configuration uses
CORRECTION = (
    "actor_rollout_ref.rollout.calculate_log_probs=true",
    "algorithm.rollout_correction.rollout_is=token",
)


def colocate(ahead: int, *extra: str) -> tuple[str, ...]:
    """``colocate_async`` with ``ahead`` batches issued ahead and the bound that admits them (``ahead`` + 1)."""
    return (
        "trainer.v1.trainer_mode=colocate_async",
        f"trainer.v1.colocate_async.num_warmup_batches={ahead}",
        f"trainer.v1.sampler.max_off_policy_threshold={ahead + 1}",
        *CORRECTION,
        *extra,
    )


#: the overrides of each configuration, added to the seed's run (sync: none)
CONFIGS: dict[str, tuple[str, ...]] = {
    "sync": (),
    "colocate_async_s1": colocate(1),
    "colocate_async_s4": colocate(4),
    "colocate_async_s4_partial": colocate(4, "trainer.v1.partial_rollout_tokens=2"),
    "separate_async_s1": (
        "trainer.v1.trainer_mode=separate_async",
        "trainer.placement=split",
        "trainer.executor=ray",
        "trainer.n_gpus_per_node=1",
        "trainer.rollout_n_gpus_per_node=1",
        "trainer.v1.separate_async.num_warmup_batches=1",
        "trainer.v1.separate_async.parameter_sync_step=2",
        "trainer.v1.sampler.max_off_policy_threshold=2",
        *CORRECTION,
    ),
}
DEFAULT_CONFIGS = ("sync", "colocate_async_s1", "colocate_async_s4", "separate_async_s1")
QUICK_CONFIGS = ("sync", "colocate_async_s1")
#: the worst staleness of a step's responses (trainer version minus the oldest version of a response's tokens)
STALENESS_KEY = "training/off_policy/trajectory_staleness_worst/max"
EVICTED_KEY = "training/off_policy/evicted_samples"
log = common.make_log("async_curves")


# ------------------------------------------------------------------------------------------- one run
def config_run(
    settings: dict[str, Any], config: str, seed: int, args: argparse.Namespace, work: Path, env: dict[str, str]
) -> dict[str, Any]:
    """One ``rlcore run`` of ``config`` at ``seed``: its validation curve, training reward per step, staleness
    and wall time."""
    run_root = work / f"runs-{config}-{seed}"
    overrides = learning_curve.rlcore_curve_overrides(
        settings, seed, args.steps, args.eval_every, work / f"train-seed{seed}.parquet", run_root
    )
    cmd = common.rlcore_command(["--preset", settings["preset"], *overrides, *CONFIGS[config]])
    log_file = work / f"{config}-{seed}.log"
    log(f"{config} seed {seed}: {args.steps} steps (log {log_file})")
    child = common.run_checked(cmd, env, log_file, f"{config} seed {seed}")
    data_source = learning_curve.read_rows(settings["val_file"])[0]["data_source"]
    curve = learning_curve.read_rlcore_curve(run_root, data_source)
    _, rows = common.read_metrics(run_root)
    staleness = common.series(rows, STALENESS_KEY)
    result = {
        "val": curve["val"],
        "train": {str(r["step"]): float(r["critic/score/mean"]) for r in rows if "critic/score/mean" in r},
        "staleness_worst_max_mean": round(statistics.fmean(staleness), 4) if staleness else 0.0,
        "staleness_worst_max_peak": max(staleness, default=0.0),
        "evicted_groups": int(sum(common.series(rows, EVICTED_KEY))),
        "wall_s": round(child.wall_s, 1),
    }
    log(
        f"{config} seed {seed}: done in {child.wall_s:.0f} s, final validation reward "
        f"{list(curve['val'].values())[-1]:.3f}, mean worst staleness {result['staleness_worst_max_mean']}"
    )
    return result


# ---------------------------------------------------------------------------------------- statistics
def final_reward(curve: dict[str, float], window: int) -> float:
    """The mean of the last ``window`` validations of ``curve`` (``{step: reward}``)."""
    values = [v for _, v in sorted(curve.items(), key=lambda kv: int(kv[0]))][-window:]
    return statistics.fmean(values)


def summarise_config(runs: dict[int, dict[str, Any]], window: int, threshold: float, steps: int) -> dict[str, Any]:
    """One configuration's runs (seed: :func:`config_run`'s result) across seeds: validation reward per step
    and the steps to ``threshold`` (``learning_curve.summarise_side``), training reward per step, final reward
    per seed and its spread, wall time, staleness and whether the seeds differ."""
    finals = {str(seed): round(final_reward(run["val"], window), 4) for seed, run in runs.items()}
    curves = [json.dumps([run["val"], run["train"]], sort_keys=True) for run in runs.values()]
    train = learning_curve.summarise_side({s: r["train"] for s, r in runs.items()}, threshold, steps)
    return {
        "val": learning_curve.summarise_side({s: r["val"] for s, r in runs.items()}, threshold, steps),
        "train": {key: train[key] for key in ("steps", "per_step", "per_seed")},
        "final_val_per_seed": finals,
        "final_val": learning_curve.spread(list(finals.values())),
        "wall_s_per_seed": {str(seed): run["wall_s"] for seed, run in runs.items()},
        "wall_s": learning_curve.spread([run["wall_s"] for run in runs.values()]),
        "staleness_worst_max_mean_per_seed": {str(s): r["staleness_worst_max_mean"] for s, r in runs.items()},
        "staleness_worst_max_peak": max(r["staleness_worst_max_peak"] for r in runs.values()),
        "evicted_groups_per_seed": {str(s): r["evicted_groups"] for s, r in runs.items()},
        "seeds_give_different_curves": len(runs) > 1 and len(set(curves)) == len(curves),
    }


def compare_with_sync(summary: dict[str, Any], sync: dict[str, Any], resolution: float) -> dict[str, Any]:
    """The verdict of one configuration against ``sync`` (both :func:`summarise_config`): whether its mean final
    reward is at least sync's minus ``max(2 x the larger seed std, resolution)``."""
    tolerance = max(2 * max(summary["final_val"]["std"], sync["final_val"]["std"]), resolution)
    gap = summary["final_val"]["mean"] - sync["final_val"]["mean"]
    return {
        "final_minus_sync": round(gap, 4),
        "tolerance": round(tolerance, 4),
        "reaches_sync": gap >= -tolerance,
    }


# ---------------------------------------------------------------------------------------------- plot
def plot(configs: dict[str, dict[str, Any]], title: str, png: Path) -> Path:
    """Validation (left) and training reward (right) against the step, one line per configuration with its
    min-max band across seeds; save ``png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (val_ax, train_ax) = plt.subplots(1, 2, figsize=(14, 4.8))
    try:
        xlabel = "RL step (one generation batch)"
        val = {name: c["val"] for name, c in configs.items()}
        train = {name: c["train"] for name, c in configs.items()}
        learning_curve.draw_curves(val_ax, val, None, "greedy validation reward", xlabel, "validation")
        learning_curve.draw_curves(train_ax, train, None, "sampled training reward (mean)", xlabel, "training")
        fig.suptitle(title)
        png.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(png, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)
    return png


# ---------------------------------------------------------------------------------------------- driver
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--configs",
        default=",".join(DEFAULT_CONFIGS),
        help=f"comma-separated, sync first: {', '.join(CONFIGS)} (default {','.join(DEFAULT_CONFIGS)})",
    )
    parser.add_argument("--task", default="arith", help="bundled task: arith (rlcore run's default) or arith-chain")
    parser.add_argument("--steps", type=int, default=0, help="steps per run (default: the preset's, 40)")
    parser.add_argument("--eval-every", type=int, default=1, help="steps between validations (default 1)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per configuration (default 3)")
    parser.add_argument("--first-seed", type=int, default=1, help="the seeds are FIRST, FIRST+1, ... (default 1)")
    parser.add_argument(
        "--final-window", type=int, default=3, help="validations averaged into a seed's final reward (default 3)"
    )
    parser.add_argument("--reach", type=float, default=0.9, help="share of sync's final reward to reach (default 0.9)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (default 1)")
    parser.add_argument("--png", default="", help="the figure (default bench/figures/async_curves_<task>.png)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke run: {','.join(QUICK_CONFIGS)}, 1 seed, 4 steps, validation every 2 (overrides those options)",
    )
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every run (default 1)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (data, logs, run dirs)")
    args = parser.parse_args(argv)
    if args.quick:
        args.configs, args.seeds, args.steps, args.eval_every = ",".join(QUICK_CONFIGS), 1, 4, 2
    return args


def check_args(args: argparse.Namespace) -> list[str]:
    """Errors for a bad command line (before anything is built); the configurations to run."""
    configs = [name.strip() for name in args.configs.split(",") if name.strip()]
    unknown = [name for name in configs if name not in CONFIGS]
    if unknown:
        raise BenchError(f"unknown --configs {', '.join(unknown)}: use {', '.join(CONFIGS)}")
    if not configs or configs[0] != "sync" or len(set(configs)) != len(configs):
        raise BenchError("--configs must start with sync and name each configuration once")
    if args.task not in learning_curve.TASKS:
        raise BenchError(f"unknown --task {args.task!r}: use {' or '.join(learning_curve.TASKS)}")
    for name in ("seeds", "first_seed", "jobs", "eval_every", "final_window"):
        if getattr(args, name) < 1:
            raise BenchError(f"--{name.replace('_', '-')} must be >= 1")
    if args.steps < 0:
        raise BenchError("--steps must be >= 1 (0: the preset's)")
    if not 0 < args.reach <= 1:
        raise BenchError("--reach must be in (0, 1]")
    common.check_modules([("rlcore", "train"), ("torch", "train"), ("matplotlib", "train"), ("pyarrow", "train")])
    return configs


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """Every configuration at every seed (``--jobs`` runs at a time); the JSON result and the figure."""
    configs = check_args(args)
    env = common.bench_env(args.threads)
    settings = learning_curve.task_settings(args.task, "none", None)
    args.steps = args.steps or settings["preset_steps"]
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    resolution = 1 / len(learning_curve.read_rows(settings["val_file"]))
    with common.work_dir("rlcore_async_curves_", args.keep, log) as work:
        for seed in seeds:
            learning_curve.write_seed_data(settings, seed, args.steps, work)
        jobs = [(config, seed) for seed in seeds for config in configs]  # seed by seed: a slow patch hits all

        def run(job: tuple[str, int]) -> dict[str, Any]:
            return config_run(settings, job[0], job[1], args, work, env)

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            results = dict(zip(jobs, pool.map(run, jobs)))
    sync_final = statistics.fmean(final_reward(results[("sync", seed)]["val"], args.final_window) for seed in seeds)
    threshold = args.reach * sync_final
    summaries = {
        config: summarise_config(
            {seed: results[(config, seed)] for seed in seeds}, args.final_window, threshold, args.steps
        )
        for config in configs
    }
    for config in configs[1:]:
        summaries[config]["verdict"] = compare_with_sync(summaries[config], summaries["sync"], resolution)
    png = Path(args.png) if args.png else Path(BENCH_DIR) / "figures" / f"async_curves_{args.task}.png"
    title = f"{settings['preset']}: sync and async modes, {args.seeds} seed(s) each, {args.steps} steps"
    plot(summaries, title, png)
    return {
        "task": args.task,
        "preset": settings["preset"],
        "steps": args.steps,
        "eval_every": args.eval_every,
        "seeds": seeds,
        "final_window": args.final_window,
        "reach": args.reach,
        "reach_threshold": round(threshold, 4),
        "criterion": "reaches sync: mean final reward >= sync's - max(2 x larger seed std, 1 validation prompt)",
        "validation_prompt_share": round(resolution, 4),
        "overrides": {config: list(CONFIGS[config]) for config in configs},
        "configs": summaries,
        "png": str(png),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the JSON result."""
    args = parse_args(argv)
    return common.run_main("async_curves", args.threads, lambda: benchmark(args))


if __name__ == "__main__":
    sys.exit(main())
