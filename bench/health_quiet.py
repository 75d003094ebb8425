"""Whether the built-in run-health monitors stay quiet on healthy runs: the bundled default run and each
algorithm preset, at several seeds.

For each configuration and seed it runs ``rlcore run`` (the default run at its 40 steps; a preset at
``--preset-steps`` steps, enough for every monitor's window, with the rollout's log-probs so that
``logprob_mismatch`` has its signal), each run dumping its generations (``trainer.rollout_data_dir``) for the
monitors that read responses; a run whose ``summary.json`` exists under ``--out`` is reused. Then it replays
each run with ``rlcore health RUN_DIR`` (the findings, exit status 1 when any) and measures how close each
signal came to its default threshold. Prints one JSON object: per run the findings and the margins, and the
closest approach of each signal over all runs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from statistics import median
from typing import Any

PRESETS = ("dapo", "drgrpo", "gspo", "prime", "sppo")


def run(out: Path, name: str, args: list[str], start: bool) -> Path | None:
    """The run directory of ``rlcore run args`` under ``out/name``, run now unless it finished before (or
    None when it did not and ``start`` is false)."""
    folder = out / name
    done = list(folder.glob("*/*/summary.json"))
    if not done and not start:
        return None
    if not done:
        command = [sys.executable, "-m", "rlcore", "run", *args, f"trainer.runs_dir={folder}"]
        command += [f"trainer.rollout_data_dir={folder}/rollout", "trainer.save_final_model=false"]
        command += ["trainer.progress_bar=false", f"trainer.default_local_dir={folder}/ckpt"]
        with open(out / f"{name}.log", "w") as log:
            subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True)
        done = list(folder.glob("*/*/summary.json"))
    return done[0].parent


def margins(rows: list[dict[str, Any]]) -> dict[str, float]:
    """How close each metric signal came to its monitor's default threshold (the monitors' own arithmetic)."""
    from rlcore_plugin_health.signals import robust_z, slope

    def series(key: str) -> list[tuple[int, float]]:
        return [(int(r["step"]), float(r[key])) for r in rows if r.get(key) is not None and int(r["step"]) >= 1]

    found: dict[str, float] = {}
    for key, name in (("actor/ppo_kl", "kl_z_max"), ("actor/grad_norm", "grad_norm_z_max")):
        values = [v for _, v in series(key)]
        zs = [
            robust_z(values[i], values[max(0, i - 20) : i], max(0.25 * abs(median(values[max(0, i - 20) : i])), 1e-3))
            for i in range(3, len(values))
        ]
        found[name] = round(max(zs, default=0.0), 2)
    entropy = [v for _, v in series("actor/entropy")]
    found["entropy_min_fraction_of_first"] = round(min(entropy) / entropy[0], 3) if entropy else 1.0
    for key, name in (
        ("response_length/clip_ratio", "clip_ratio_max"),
        ("actor/pg_clipfrac", "pg_clipfrac_max"),
        ("training/rollout_probs_diff_mean", "probs_diff_mean_max"),
    ):
        found[name] = float(f"{max((v for _, v in series(key)), default=0.0):.3g}")
    val_metric = next((k for r in rows for k in r if k.startswith("val-core/")), None)
    rises = []
    for end in range(10, int(rows[-1]["step"]) + 1):
        train = [(s, v) for s, v in series("critic/score/mean") if end - 20 < s <= end]
        val = [(int(r["step"]), float(r[val_metric])) for r in rows if val_metric and r.get(val_metric) is not None]
        val = [(s, v) for s, v in val if end - 20 < s <= end]
        if len(train) >= 10 and len(val) >= 3 and slope(val) * (val[-1][0] - val[0][0]) <= 0.02:
            rises.append(slope(train) * (train[-1][0] - train[0][0]))
    found["train_rise_max_while_val_flat"] = round(max(rises, default=0.0), 3)
    return found


def main() -> None:
    """Parse the arguments, run and replay every configuration, print the JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("outputs/health-quiet"), help="where the runs go")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per configuration (default 3)")
    parser.add_argument("--preset-steps", type=int, default=20, help="training steps of a preset's run")
    parser.add_argument("--replay-only", action="store_true", help="replay the finished runs under --out only")
    args = parser.parse_args()
    from rlcore.tracking.sinks import read_metrics

    args.out.mkdir(parents=True, exist_ok=True)
    configs: list[tuple[str, list[str]]] = [("default", [])]
    configs += [
        (
            p,
            [
                "--preset",
                p,
                f"trainer.total_training_steps={args.preset_steps}",
                "actor_rollout_ref.rollout.calculate_log_probs=true",
            ],
        )
        for p in PRESETS
    ]
    runs: dict[str, Any] = {}
    for config, extra in configs:
        for seed in range(1, args.seeds + 1):
            seeds = [f"trainer.seed={seed}", f"data.seed={seed}", f"actor_rollout_ref.rollout.seed={seed}"]
            run_dir = run(args.out, f"{config}-s{seed}", [*extra, *seeds], not args.replay_only)
            if run_dir is None:
                continue
            replay = subprocess.run(
                [sys.executable, "-m", "rlcore", "health", str(run_dir)], capture_output=True, text=True, check=False
            )
            rows = read_metrics(run_dir / "metrics.jsonl")
            runs[f"{config}-s{seed}"] = {
                "steps": int(rows[-1]["step"]),
                "findings": [line for line in replay.stdout.splitlines() if line.startswith("health: [")],
                "exit_status": replay.returncode,
                "margins": margins(rows),
            }
    keys = next(iter(runs.values()))["margins"].keys()
    worst = {key: (min if key.startswith("entropy") else max)(r["margins"][key] for r in runs.values()) for key in keys}
    total = sum(len(r["findings"]) for r in runs.values())
    print(json.dumps({"runs": len(runs), "findings": total, "closest": worst, "per_run": runs}))


if __name__ == "__main__":
    main()
