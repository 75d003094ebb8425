"""Peak memory of the seed's verl GSM8K command line run with ``rlcore run`` and the HF rollout engine.

The command line is ``shared/seed-command.txt`` used as written (as ``tests/test_seed_command.py`` runs it:
:mod:`rlcore_testkit.seed`), on the tiny model of ``rlcore_testkit.tiny``, the CPU and the HF engine, for
one step: 1024 prompts x n=3 = 3072 responses of at most 16 tokens, prompts padded to 512 tokens. Each
``--budgets`` value is one fresh ``rlcore run`` with ``actor_rollout_ref.rollout.max_num_batched_tokens``
set to it (``0`` = the key left at its default); the figure is the child's ``ru_maxrss`` (``os.wait4``,
:func:`common.run_child`), next to the run's ``timing_s/gen`` and the mean response length.

    python bench/rollout_memory.py                       # the default budget
    python bench/rollout_memory.py --budgets 0,1000000   # default, and one chunk of everything (unchunked)

Needs ``shared/`` (the seed command and the GSM8K copy) beside the checkout. Prints one JSON object on
stdout; progress goes to stderr; bad input gives a one-line ``error: ...`` and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:
    sys.path.insert(0, BENCH_DIR)
import common  # noqa: E402  (child processes, peak RSS, the JSON main)
from common import BenchError  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared"
#: the harness's target for the seed command's peak RSS with the HF engine, in MB
TARGET_PEAK_MB = 2048
log = common.make_log("rollout_memory")


def parse_budgets(value: str) -> list[int]:
    """The ``--budgets`` list: non-negative integers separated by commas (0 = the default)."""
    try:
        budgets = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise BenchError(f"--budgets must be integers separated by commas, got {value!r}") from None
    if not budgets or any(b < 0 for b in budgets):
        raise BenchError(f"--budgets must be non-negative integers, got {value!r}")
    return budgets


def run_budget(root: Path, model_dir: Path, seed_args: list[str], budget: int, env: dict[str, str]) -> dict[str, Any]:
    """One seed-command step with rollout token budget ``budget`` (0 = default); its peak RSS and timings."""
    from rlcore_testkit.seed import tiny_step_arguments

    runs = root / f"runs-{budget}"
    extra = [f"actor_rollout_ref.rollout.max_num_batched_tokens={budget}"] if budget else []
    cmd = common.rlcore_command(
        [*seed_args, *tiny_step_arguments(model_dir, runs), "actor_rollout_ref.rollout.name=hf", *extra]
    )
    child = common.run_checked(cmd, env, root / f"budget-{budget}.log", f"seed command (budget {budget or 'default'})")
    _, rows = common.read_metrics(runs)
    step = rows[-1]
    log(f"budget {budget or 'default'}: peak RSS {child.peak_rss_mb:.0f} MB, gen {step.get('timing_s/gen')} s")
    return {
        "max_num_batched_tokens": budget or "default",
        "peak_rss_mb": round(child.peak_rss_mb, 1),
        "within_target": child.peak_rss_mb <= TARGET_PEAK_MB,
        "gen_s": step.get("timing_s/gen"),
        "step_s": step.get("timing_s/step"),
        "response_length_mean": step.get("response_length/mean"),
        "process_wall_s": round(child.wall_s, 1),
    }


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """Prepare the data and the tiny model once, then one run per budget."""
    budgets = parse_budgets(args.budgets)
    seed_file, gsm8k = SHARED / "seed-command.txt", SHARED / "data" / "gsm8k"
    if not (seed_file.is_file() and gsm8k.is_dir()):
        raise BenchError(f"the seed command and GSM8K copy are not at {SHARED} (shared/ beside the checkout)")
    from rlcore_testkit.seed import seed_arguments, seed_env
    from rlcore_testkit.tiny import make_tiny_model_dir

    with common.work_dir("rlcore_rollout_memory_", args.keep, log) as root:
        env = {**seed_env(root), **common.bench_env(args.threads)}
        env.update(HOME=str(root))
        env = {k: v for k, v in env.items() if not k.startswith("RLCORE_")}
        log("preparing GSM8K and the tiny model")
        seed_args = seed_arguments(seed_file, gsm8k, root, env)
        model_dir = make_tiny_model_dir(root / "model")
        runs = [run_budget(root, model_dir, seed_args, budget, env) for budget in budgets]
    return {"target_peak_rss_mb": TARGET_PEAK_MB, "responses": 3072, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run the benchmark and print its JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budgets", default="0", help="rollout.max_num_batched_tokens values, comma-separated")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the run (default 1; 0 = unset)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (model, data, logs)")
    args = parser.parse_args(argv)
    return common.run_main("rollout_memory", args.threads, lambda: benchmark(args))


if __name__ == "__main__":
    sys.exit(main())
