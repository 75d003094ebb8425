"""GRPO step time of rlcore (``rlcore run``, HF rollout) against TRL's ``GRPOTrainer`` on the same work.

Both sides get the same locally built model and tokenizer (``rlcore_testkit.tiny``, saved once to a
temp dir and loaded from there by both), the same prompts, the same reward function (one ``reward.py``
file with an rlcore ``compute_score`` and a TRL reward function around one scorer), the same group size,
response length, learning rate (constant, no weight decay), temperature 1, number of steps, one optimizer
step per RL step, no KL / reference model, no validation, no checkpoints, and gradient checkpointing off on
both sides (TRL turns it on by default; ``--gradient-checkpointing`` turns it on for both), float32 on both
sides unless ``--bf16 SIZE`` names the size (bf16 mixed precision on both: TRL's ``bf16=True``, rlcore's
``fsdp_config.cpu_autocast=true``; float32 weights and optimizer state on both). The runs alternate
``TRL, rlcore, TRL, rlcore, ...`` (``--rounds`` pairs), each in a fresh process started by this script,
so that a slow patch of a shared machine hits both sides alike.

Sizes: ``tiny`` (~0.1M parameters, 2 prompts x 4 generations, 32 new tokens: framework overhead
dominates) and ``small`` (~25M parameters, 8 prompts x 4 generations, 128 new tokens: compute dominates).

Step times are each framework's own: TRL's from a ``TrainerCallback`` (``on_step_begin`` to
``on_step_end``: generation, reward, loss, backward, optimizer step), rlcore's ``timing_s/step`` from the
run's ``metrics.jsonl`` (prompt batch, generation, reward, advantages, update, weight sync; this on-policy
update has no separate old-log-prob pass). The first ``--warmup`` steps of every run are left out of the
medians. Peak RSS is the child process's ``ru_maxrss`` (``os.wait4``). Both sides run with
``OMP_NUM_THREADS=--threads`` (default 1: on a small or shared machine, more OpenMP threads than free
cores make every op wait for descheduled threads, which distorts the comparison by an order of
magnitude; ``--threads 0`` keeps torch's default).

    python bench/vs_trl.py --size tiny                 # 2 rounds of TRL/rlcore, 20 steps each
    python bench/vs_trl.py --size small --steps 4
    python bench/vs_trl.py --size both --rounds 3 --threads 2
    python bench/vs_trl.py --size both --rounds 3 --bf16 small

``--curve`` compares learning instead of speed: both frameworks train a bundled task (``--task arith`` or
``arith-chain``) from its warm-started model with the same settings for ``--seeds`` seeds each, and the
greedy validation reward is recorded every ``--eval-every`` steps (``bench/learning_curve.py``; the mapping of
settings is in ``docs/vs-trl.md``). It prints per-step mean and spread across seeds, steps-to-0.9 and the
final reward per framework, and writes a PNG with both curves and their min-max bands:

    python bench/vs_trl.py --curve --seeds 3                      # arith, no KL, the preset's 40 steps
    python bench/vs_trl.py --curve --seeds 3 --kl low_var_kl --task arith-chain --jobs 2

The work (model, tokenizer, prompts, reward, the ``rlcore run`` command line) and the child-process and
metrics helpers come from ``bench/common.py``, shared with ``bench/step_breakdown.py``. Needs the bench
extra: ``pip install -e '.[bench]'`` (TRL and datasets). Prints one JSON object on stdout; progress goes
to stderr; bad input gives a one-line ``error: ...`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:  # ``python bench/vs_trl.py`` has it first already; other ways of loading may not
    sys.path.insert(0, BENCH_DIR)
import common  # noqa: E402  (shared with step_breakdown.py: the work, the rlcore run, child processes)
import learning_curve  # noqa: E402  (--curve)
from common import SIZES, BenchError  # noqa: E402

#: rlcore/TRL median step-time ratio to stay at or below, per size
TARGET_RATIO: dict[str, float] = {"tiny": 0.5, "small": 0.8}
log = common.make_log("vs_trl")


# ------------------------------------------------------------------------------------------- child: TRL
def trl_child(work: Path, size: str, steps: int, out: Path, checkpointing: bool, bf16: bool) -> None:
    """Train with TRL's GRPOTrainer in this process and write its per-step figures to ``out`` (JSON).

    ``checkpointing``: TRL's ``gradient_checkpointing`` (TRL defaults it to true; it is set explicitly so
    that both sides store or recompute activations alike). ``bf16``: TRL's ``bf16`` mixed precision
    (the Trainer's CPU autocast; float32 weights)."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    spec = SIZES[size]
    module_spec = importlib.util.spec_from_file_location("bench_reward", work / "reward.py")
    reward = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(reward)
    prompts = json.loads((work / "prompts.json").read_text())
    dataset = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": p["content"]}] for p in prompts],
            "answer": [p["answer"] for p in prompts],
        }
    )

    class StepTimer(TrainerCallback):
        """Wall time of every optimizer step."""

        def __init__(self) -> None:
            """No step timed yet."""
            self.times: list[float] = []
            self._start = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            """Start the step's clock."""
            self._start = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            """Record the step's wall time."""
            self.times.append(time.perf_counter() - self._start)

    batch = common.batch_size(size)
    config = GRPOConfig(
        output_dir=str(work / "trl_out"),
        use_cpu=True,
        bf16=bf16,
        fp16=False,
        per_device_train_batch_size=batch,
        num_generations=spec["generations"],
        max_completion_length=spec["new_tokens"],
        gradient_accumulation_steps=1,
        num_iterations=1,
        learning_rate=common.LEARNING_RATE,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        gradient_checkpointing=checkpointing,
        beta=0.0,
        loss_type="dapo",
        scale_rewards="group",
        temperature=1.0,
        top_p=1.0,
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    timer = StepTimer()
    trainer = GRPOTrainer(
        model=str(work / "model"), reward_funcs=reward.trl_reward, args=config, train_dataset=dataset, callbacks=[timer]
    )
    start = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - start
    logs = [h for h in trainer.state.log_history if "reward" in h]
    seen = [float(h.get("num_tokens", 0.0)) for h in logs]
    tokens = [b - a for a, b in zip([0.0] + seen, seen)]
    result = {
        "step_s": timer.times,
        "tokens": tokens,
        "response_len_mean": [float(h.get("completions/mean_length", float("nan"))) for h in logs],
        "reward_mean": [float(h.get("reward", float("nan"))) for h in logs],
        "train_s": train_s,
        "threads": torch.get_num_threads(),
        "versions": common.trl_versions(),
    }
    out.write_text(json.dumps(result))


# ---------------------------------------------------------------------------------------- rlcore's side
def read_rlcore_run(run_root: Path) -> dict[str, Any]:
    """Per-step figures from the single run directory under ``run_root`` (its ``metrics.jsonl``)."""
    run_dir, rows = common.read_metrics(run_root)
    return {
        "step_s": common.series(rows, "timing_s/step"),
        "tokens": common.series(rows, "perf/total_num_tokens"),
        "response_len_mean": common.series(rows, "response_length/mean"),
        "reward_mean": common.series(rows, "critic/score/mean"),
        "stages_s": common.prefixed_series(rows, "timing_s/", exclude=("step", "outside_worker")),
        "run_dir": str(run_dir),
    }


# -------------------------------------------------------------------------------------------- the parent
def summarise(runs: list[dict[str, Any]], warmup: int, batch: int) -> dict[str, Any]:
    """Median step time, tokens/s and peak RSS over the runs of one side (first ``warmup`` steps dropped)."""
    steps = common.pool((r["step_s"] for r in runs), warmup, required=True)
    tokens = common.pool((r["tokens"] for r in runs), warmup)
    lengths = common.pool((r["response_len_mean"] for r in runs), warmup)
    median = statistics.median(steps)
    mean_len = statistics.fmean(lengths) if lengths else float("nan")
    out = {
        "median_step_s": round(median, 4),
        "min_step_s": round(min(steps), 4),
        "max_step_s": round(max(steps), 4),
        "per_round_median_step_s": [common.median(r["step_s"][warmup:], 4) for r in runs],
        "timed_steps": len(steps),
        "tokens_per_s": round(sum(tokens) / sum(steps), 1) if len(tokens) == len(steps) else None,
        "response_tokens_per_s": round(mean_len * batch / median, 1),
        "response_len_mean": round(mean_len, 2),
        "reward_mean": round(statistics.fmean(x for r in runs for x in r["reward_mean"]), 4),
        "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs), 1),
        "process_wall_s": [round(r["process_wall_s"], 2) for r in runs],
    }
    if "stages_s" in runs[0]:
        stages = sorted({k for r in runs for k in r["stages_s"]})
        medians = {k: common.median(common.pool((r["stages_s"].get(k, []) for r in runs), warmup)) for k in stages}
        out["median_stage_s"] = {k: v for k, v in medians.items() if v is not None}
    return out


def bench_size(size: str, args: argparse.Namespace, root: Path, env: dict[str, str]) -> dict[str, Any]:
    """Prepare the work of ``size`` and run ``--rounds`` pairs TRL, rlcore; return the size's JSON section."""
    steps, warmup = common.run_length(size, args.steps, args.warmup)
    bf16 = size in bf16_sizes(args)
    work = root / size
    log(f"{size}: building model, tokenizer and data in {work}")
    facts = common.prepare_work(work, size)
    runs: dict[str, list[dict[str, Any]]] = {"trl": [], "rlcore": []}
    order: list[str] = []
    for rnd in range(args.rounds):
        for side in ("trl", "rlcore"):
            order.append(side)
            tag = f"{side}-{rnd}"
            log_file = work / f"{tag}.log"
            log(f"{size}: round {rnd + 1}/{args.rounds}: {side}, {steps} steps (log {log_file})")
            out, run_root = work / f"{tag}.json", work / f"runs-{rnd}"
            if side == "trl":
                cmd = [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--child",
                    "trl",
                    "--work",
                    str(work),
                    "--size",
                    size,
                    "--steps",
                    str(steps),
                    "--child-out",
                    str(out),
                    *(["--gradient-checkpointing"] if args.gradient_checkpointing else []),
                    *(["--bf16", size] if bf16 else []),
                ]
            else:
                overrides = common.rlcore_overrides(work, size, steps, facts["prompt_tokens_max"], run_root)
                checkpointing = str(args.gradient_checkpointing).lower()
                cmd = common.rlcore_command(
                    [
                        *overrides,
                        f"actor_rollout_ref.model.enable_gradient_checkpointing={checkpointing}",
                        f"actor_rollout_ref.actor.fsdp_config.cpu_autocast={str(bf16).lower()}",
                    ]
                )
            child = common.run_checked(cmd, env, log_file, f"{size} {side} run {rnd + 1}")
            result = json.loads(out.read_text()) if side == "trl" else read_rlcore_run(run_root)
            result.update(process_wall_s=child.wall_s, peak_rss_mb=child.peak_rss_mb)
            runs[side].append(result)
            log(
                f"{size}: {side}: median step {common.median(result['step_s'][warmup:], 4)} s, "
                f"peak RSS {child.peak_rss_mb:.0f} MB"
            )
    batch = common.batch_size(size)
    trl_summary = summarise(runs["trl"], warmup, batch)
    rlcore_summary = summarise(runs["rlcore"], warmup, batch)
    ratio = rlcore_summary["median_step_s"] / trl_summary["median_step_s"]
    return {
        **common.work_summary(size, facts),
        "steps_per_run": steps,
        "warmup_steps_excluded_per_run": warmup,
        "rounds": args.rounds,
        "order": order,
        "gradient_checkpointing": args.gradient_checkpointing,
        "bf16": bf16,
        "threads": runs["trl"][0]["threads"],
        "trl": trl_summary,
        "rlcore": rlcore_summary,
        "ratio_rlcore_over_trl": round(ratio, 3),
        "target_ratio": TARGET_RATIO[size],
        "meets_target": ratio <= TARGET_RATIO[size],
        "_versions": runs["trl"][0]["versions"],
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``--child`` is internal: one TRL run in a fresh process)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="both", help="tiny, small or both (default both)")
    common.add_run_args(
        parser,
        0,
        "steps per run (default: tiny 20, small 5)",
        None,
        "first steps of each run left out of the medians (default: tiny 2, small 1)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="TRL/rlcore pairs (default 2)")
    parser.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="recompute activations in the backward pass on both sides (TRL's default; off by default here, "
        "as in rlcore and verl)",
    )
    parser.add_argument(
        "--bf16",
        default="",
        metavar="SIZE",
        help="tiny, small or both: run these sizes in bf16 mixed precision on both sides (TRL's bf16=True, "
        "rlcore's actor_rollout_ref.actor.fsdp_config.cpu_autocast=true; float32 weights on both; fast on "
        "CPUs with AMX or AVX512-BF16). Default: none, float32",
    )
    curve = parser.add_argument_group("learning curves (--curve)")
    curve.add_argument(
        "--curve",
        action="store_true",
        help="compare greedy validation reward curves on a bundled task instead of step times "
        "(--steps: default the preset's trainer.total_training_steps)",
    )
    curve.add_argument("--seeds", type=int, default=3, help="seeds per framework (default 3)")
    curve.add_argument(
        "--first-seed", type=int, default=1, help="the seeds are FIRST, FIRST+1, ... (default 1: more seeds later)"
    )
    curve.add_argument(
        "--task", default="arith", help=f"bundled task: {' or '.join(learning_curve.TASKS)} (default arith)"
    )
    curve.add_argument(
        "--kl", default="none", help="none or low_var_kl (TRL: beta with its k3 estimator; default none)"
    )
    curve.add_argument(
        "--kl-coef", type=float, default=None, help="KL coefficient (default: rlcore's kl_loss_coef, 0.001)"
    )
    curve.add_argument(
        "--eval-every", type=int, default=0, help="RL steps between validations (default: the preset's test_freq)"
    )
    curve.add_argument("--threshold", type=float, default=0.9, help="reward whose first step is reported (default 0.9)")
    curve.add_argument("--jobs", type=int, default=1, help="runs at a time (default 1)")
    curve.add_argument("--png", default="", help="the figure (default bench/figures/vs_trl_curve_<task>_<kl>.png)")
    curve.add_argument(
        "--trl-kl-bias-correction",
        action="store_true",
        help="keep TRL's default use_bias_correction_kl=True (the KL term times the importance ratio); "
        "off by default, as verl's low_var_kl has no such factor",
    )
    parser.add_argument("--child", choices=["trl", "trl-curve"], help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    parser.add_argument("--seed-value", type=int, default=1, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def bf16_sizes(args: argparse.Namespace) -> list[str]:
    """The sizes ``--bf16`` names (none when not given)."""
    return common.check_sizes(args.bf16, allow_both=True, option="--bf16") if args.bf16 else []


def check_args(args: argparse.Namespace) -> list[str]:
    """Validate the command line and the environment; return the sizes to run."""
    sizes = common.check_sizes(args.size, allow_both=True)
    common.check_non_negative(args, "steps", "warmup", "threads")
    if args.rounds < 1:
        raise BenchError("--rounds must be >= 1")
    for size in sizes:
        common.run_length(size, args.steps, args.warmup)
    bf16_sizes(args)
    common.check_modules(
        [("trl", "bench"), ("datasets", "bench"), ("rlcore", "train"), ("torch", "train"), ("pyarrow", "train")]
    )
    return sizes


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """Every size's runs; the JSON result without the common header."""
    from importlib.metadata import version

    sizes = check_args(args)
    env = common.bench_env(args.threads)
    with common.work_dir("rlcore_vs_trl_", args.keep, log) as root:
        results = {size: bench_size(size, args, root, env) for size in sizes}
    versions = [results[size].pop("_versions") for size in sizes][0]
    versions["rlcore"] = version("rlcore")
    return {"versions": versions, "sizes": results}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with ``--child``, one TRL run) and print the JSON result."""
    args = parse_args(argv)
    if args.child == "trl-curve":
        learning_curve.trl_curve_child(
            Path(args.work),
            args.seed_value,
            args.steps,
            args.eval_every,
            Path(args.child_out),
            args.trl_kl_bias_correction,
        )
        return 0
    if args.curve:
        return common.run_main("vs_trl_curve", args.threads, lambda: learning_curve.run_curves(args, Path(__file__)))
    if args.child == "trl":
        bf16 = bool(args.bf16)
        trl_child(Path(args.work), args.size, args.steps, Path(args.child_out), args.gradient_checkpointing, bf16)
        return 0
    return common.run_main("vs_trl", args.threads, lambda: benchmark(args))


if __name__ == "__main__":
    sys.exit(main())
