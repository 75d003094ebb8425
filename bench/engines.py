"""FSDP against Megatron: the median rlcore GRPO step time of each training engine on the same work.

Runs the ``bench/vs_trl.py`` work (same model sizes, prompts, reward and settings, built by
``bench/common.py``; default ``small``) with ``actor_rollout_ref.actor.strategy=fsdp`` and ``=megatron``, in
alternating fresh ``rlcore run`` processes (fsdp, megatron, fsdp, megatron, ... for ``--rounds`` pairs, so
that a slow patch of a shared machine hits both alike), local executor, HF rollout, one rank. It reads each
run's per-step ``timing_s/*`` and ``timing_worker_s/*`` from ``metrics.jsonl``; medians are over the steps
after ``--warmup`` of every run of an engine.

    python bench/engines.py                          # small, 5 steps per run, 2 rounds
    python bench/engines.py --size tiny --steps 12 --rounds 1
    python bench/engines.py --moe --size tiny        # a Qwen3-MoE of the same attention (bench/common.py MOE_SHAPES)

``--moe`` trains a mixture of experts instead of the dense model and adds the medians of
``actor/moe_aux_loss`` and ``actor/moe_load_max_over_mean``; ``--strategy`` picks the engines (default
``fsdp,megatron``). ``--ranks N`` runs N worker processes under Ray (the batch split over them); with ``--moe``
the Megatron engine then splits the experts over the N ranks (expert parallelism, :func:`moe_overrides`).

    python bench/engines.py --moe --size tiny --ranks 2   # FSDP on 2 ranks against Megatron with EP=2
    python bench/engines.py --size tiny --lora 8          # LoRA on both: peft (FSDP) against model.lora.* (Megatron)

``--lora R`` trains rank-``R`` LoRA adapters (alpha ``2R``) on every linear layer of the decoder: FSDP through
peft (``model.lora_rank``, ``target_modules=all-linear``), Megatron through verl 0.10's ``model.lora.*`` (its
default targets ``linear_qkv``, ``linear_proj``, ``linear_fc1``, ``linear_fc2``: the same weights, fused).

Prints one JSON object on stdout; progress goes to stderr; bad input (or a missing megatron plugin) gives a
one-line ``error: ...`` on stderr and exit status 2. Needs ``pip install -e '.[train]'`` and
``pip install -e plugins/backend_megatron``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:  # ``python bench/engines.py`` has it first already; other loaders may not
    sys.path.insert(0, BENCH_DIR)
import common  # noqa: E402  (shared with vs_trl.py and step_breakdown.py: the work, the rlcore run)
from common import BenchError  # noqa: E402

#: the training engines compared (``actor_rollout_ref.actor.strategy``), in the order each round runs them
ENGINES: tuple[str, ...] = ("fsdp", "megatron")


def moe_overrides(engine: str, ranks: int) -> tuple[str, ...]:
    """The extra overrides of ``engine`` for the ``--moe`` work on ``ranks`` ranks: FSDP shards one unit per
    decoder layer (nothing to set); Megatron splits the experts over every rank (expert parallelism)."""
    if engine == "megatron":
        return (f"actor_rollout_ref.actor.megatron.expert_model_parallel_size={ranks}",)
    return ()


def lora_overrides(engine: str, rank: int) -> tuple[str, ...]:
    """The overrides of ``engine`` for rank-``rank`` LoRA adapters (alpha ``2·rank``) on every decoder linear
    layer (none for rank 0)."""
    if rank == 0:
        return ()
    if engine == "megatron":
        return (f"actor_rollout_ref.model.lora.rank={rank}", f"actor_rollout_ref.model.lora.alpha={2 * rank}")
    return (f"actor_rollout_ref.model.lora_rank={rank}", f"actor_rollout_ref.model.lora_alpha={2 * rank}")


#: the worker methods whose time the engine decides (the rollout is the HF engine for both)
ENGINE_METHODS: tuple[str, ...] = ("update_actor", "sync_weights", "compute_log_prob")
log = common.make_log("engines")


def summarise(runs: list[list[dict[str, Any]]], walls: list[float], rss: list[float], warmup: int) -> dict[str, Any]:
    """One engine's JSON section from its runs' train-step rows, process wall times and peak RSS."""
    steps = common.pool([common.series(rows, "timing_s/step") for rows in runs], warmup, required=True)
    timed = [row for rows in runs for row in rows[warmup:]]
    stages = common.prefixed_series(timed, "timing_s/", exclude=("step", "outside_worker"))
    workers = common.prefixed_series(timed, "timing_worker_s/")
    return {
        "timed_steps": len(steps),
        "median_step_s": common.median(steps),
        "min_step_s": round(min(steps), 5),
        "max_step_s": round(max(steps), 5),
        "per_run_median_step_s": [common.median(common.series(rows, "timing_s/step")[warmup:]) for rows in runs],
        "median_stage_s": {name: common.median(values) for name, values in stages.items()},
        "median_worker_s": {name: common.median(values) for name, values in workers.items() if name in ENGINE_METHODS},
        "median_grad_norm": common.median(common.series(timed, "actor/grad_norm")),
        **{
            f"median_{name}": common.median(common.series(timed, f"actor/{name}"))
            for name in ("moe_aux_loss", "moe_load_max_over_mean")
            if any(f"actor/{name}" in row for row in timed)
        },
        "process_wall_s": [round(wall, 1) for wall in walls],
        "peak_rss_mb": round(max(rss), 1),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="small", help="tiny or small (default small)")
    common.add_run_args(
        parser,
        0,
        "steps per run (default 0 = the size's default: tiny 20, small 5)",
        None,
        "first steps of each run left out of the medians (default: tiny 2, small 1)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="rounds of one run per engine (default 2)")
    parser.add_argument("--moe", action="store_true", help="train a Qwen3-MoE of the size (MOE_SHAPES in common.py)")
    parser.add_argument("--strategy", default=None, help="comma-separated engines (default fsdp,megatron)")
    parser.add_argument("--lora", type=int, default=0, help="LoRA rank on both engines (default 0: full training)")
    parser.add_argument(
        "--ranks", type=int, default=1, help="ranks (worker processes under Ray when > 1; Megatron MoE: EP = ranks)"
    )
    return parser.parse_args(argv)


def engines_of(args: argparse.Namespace) -> tuple[str, ...]:
    """The engines ``--strategy`` names (its default depends on ``--moe``); an unknown one is an error."""
    if args.strategy is None:
        return ENGINES
    engines = tuple(name.strip() for name in args.strategy.split(",") if name.strip())
    unknown = [name for name in engines if name not in ENGINES]
    if unknown or not engines:
        raise BenchError(f"--strategy {args.strategy!r}: choose from {', '.join(ENGINES)}")
    return engines


def check_args(args: argparse.Namespace) -> tuple[int, int]:
    """Validate the command line and the environment; return steps per run and warm-up steps."""
    common.check_sizes(args.size, allow_both=False)
    common.check_non_negative(args, "steps", "warmup", "threads", "lora")
    if args.rounds < 1:
        raise BenchError("--rounds must be >= 1")
    if args.ranks < 1:
        raise BenchError("--ranks must be >= 1")
    common.check_modules([("rlcore", "train"), ("torch", "train"), ("pyarrow", "train")])
    if "megatron" not in engines_of(args):
        return common.run_length(args.size, args.steps, args.warmup)
    for module in ("rlcore_plugin_megatron", "megatron.core"):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            raise BenchError(f"{module} is not installed: pip install -e plugins/backend_megatron")
    return common.run_length(args.size, args.steps, args.warmup)


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """Every round's run of each engine; the JSON result without the common header."""
    steps, warmup = check_args(args)
    engines = engines_of(args)
    env = common.bench_env(args.threads)
    runs: dict[str, list[list[dict[str, Any]]]] = {engine: [] for engine in engines}
    walls: dict[str, list[float]] = {engine: [] for engine in engines}
    rss: dict[str, list[float]] = {engine: [] for engine in engines}
    with common.work_dir("rlcore_engines_", args.keep, log) as root:
        log(f"{args.size}{' MoE' if args.moe else ''}: building model, tokenizer and data in {root}")
        facts = common.prepare_work(root, args.size, moe=args.moe)
        for round_index in range(args.rounds):
            for engine in engines:
                run_root = root / f"runs-{engine}-{round_index}"
                log_file = root / f"{engine}-{round_index}.log"
                log(f"round {round_index + 1}/{args.rounds}, {engine}: {steps} steps (log {log_file})")
                overrides = common.rlcore_overrides(
                    root,
                    args.size,
                    steps,
                    facts["prompt_tokens_max"],
                    run_root,
                    executor="ray" if args.ranks > 1 else "local",
                    workers=args.ranks,
                )
                extra = (*(moe_overrides(engine, args.ranks) if args.moe else ()), *lora_overrides(engine, args.lora))
                command = common.rlcore_command([*overrides, f"actor_rollout_ref.actor.strategy={engine}", *extra])
                child = common.run_checked(command, env, log_file, f"{engine} run")
                rows = common.read_metrics(run_root)[1]
                runs[engine].append(rows)
                walls[engine].append(child.wall_s)
                rss[engine].append(child.peak_rss_mb)
                log(f"{engine}: median step {common.median(common.series(rows, 'timing_s/step')[warmup:])} s")
    results = {engine: summarise(runs[engine], walls[engine], rss[engine], warmup) for engine in engines}
    out = {
        "size": args.size,
        "moe": args.moe,
        "lora_rank": args.lora,
        "ranks": args.ranks,
        **common.work_summary(args.size, facts),
        "steps_per_run": steps,
        "warmup_steps_excluded_per_run": warmup,
        "rounds": args.rounds,
        "order": [engine for _ in range(args.rounds) for engine in engines],
        **results,
    }
    if "fsdp" in results and "megatron" in results:
        fsdp, megatron = results["fsdp"], results["megatron"]
        out["ratio_megatron_over_fsdp"] = round(megatron["median_step_s"] / fsdp["median_step_s"], 3)
        update = "update_actor"
        out["ratio_update_actor_megatron_over_fsdp"] = round(
            megatron["median_worker_s"][update] / fsdp["median_worker_s"][update], 3
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the JSON result (exit 2 with a one-line error on bad input)."""
    args = parse_args(argv)
    return common.run_main("engines", args.threads, lambda: benchmark(args))


if __name__ == "__main__":
    sys.exit(main())
