"""On-policy distillation on a bundled CPU task: students distilled from an RL-trained teacher against RL.

``rlcore run`` processes on a bundled task (``--task arith``: ``arith-cpu``, the plain ``rlcore run``; or
``arith-chain``), all from its shipped warm-started model:

1. **teacher** — GRPO with the task's verifier for ``--teacher-steps`` steps (the default run), with the first
   seed. Its last checkpoint, exported in Hugging Face format (``actor.checkpoint.save_contents`` with
   ``hf_model``), is the teacher.
2. per seed, **rl** — the same GRPO run for ``--student-steps`` steps (for the first seed the teacher run's
   own first steps: the same process up to there, the learning rate being constant), and **distill** — the
   warm-started student, ``--student-steps`` steps of on-policy distillation from the teacher
   (``rlcore-plugin-distill``: PG OPD with ``k1``, the teacher as the only training signal,
   ``use_task_rewards=false``; the verifier only scores validation), with ``--distill-n`` responses per
   prompt (default the task's ``rollout.n``, as RL's; distillation needs no groups, so 1 works).

Every run scores the greedy responses to the validation set every ``--eval-every`` steps
(``val-core/<source>/reward/mean@1``). The JSON gives, per side, the curves across seeds (mean, std, min,
max per step: ``learning_curve.summarise_side``), the first step each seed comes within ``--tolerance`` of
the teacher's final accuracy, and with ``--png`` a figure of both sides (``learning_curve.plot_curves``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import learning_curve  # noqa: E402

#: ``--task`` names and the presets they train (the plain ``rlcore run`` trains ``arith-cpu``)
TASKS = learning_curve.TASKS
ARR = "actor_rollout_ref"


def seed_overrides(seed: int) -> list[str]:
    """The overrides that seed a run (data order, sampling, the update's shuffling)."""
    return [f"trainer.seed={seed}", f"{ARR}.rollout.seed={seed}", f"{ARR}.actor.data_loader_seed={seed}"]


def one_run(name: str, extra: list[str], root: Path, threads: int, log: Any) -> dict[str, Any]:
    """``rlcore run *extra`` in ``root/name``; its greedy validation curve ``{step: reward}`` (steps as strings)
    and its distillation loss per step."""
    cwd = root / name
    cwd.mkdir()
    log(f"{name}: rlcore run {' '.join(extra)}")
    command = [sys.executable, "-m", "rlcore", "run", *extra, "trainer.progress_bar=false"]
    env = common.bench_env(threads)
    result = common.run_checked(["env", "-C", str(cwd), *command], env, root / f"{name}.log", name)
    run_dir, _ = common.read_metrics(cwd / "outputs")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    keys = {k for row in rows for k in row if k.startswith("val-core/") and k.endswith("/reward/mean@1")}
    if len(keys) != 1:
        raise common.BenchError(f"{name}: expected one validation reward metric, found {sorted(keys)}")
    (key,) = keys
    val = {str(int(row["step"])): round(row[key], 4) for row in rows if row.get(key) is not None}
    losses = [round(row["actor/distillation/loss"], 4) for row in rows if "actor/distillation/loss" in row]
    return {"wall_s": round(result.wall_s, 1), "val_by_step": val, "distillation_loss_by_step": losses}


def main() -> int:
    """Parse the options, run the teacher and both sides per seed, print the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="arith", choices=sorted(TASKS), help="the bundled task (default arith)")
    parser.add_argument("--teacher-steps", type=int, default=30, help="RL steps of the teacher (default 30)")
    parser.add_argument("--student-steps", type=int, default=15, help="steps of each side (default 15)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per side (default 3)")
    parser.add_argument("--first-seed", type=int, default=1, help="the first seed (default 1)")
    parser.add_argument(
        "--distill-n", type=int, help="rollout.n of the distillation runs (default: the task's, as RL's)"
    )
    parser.add_argument("--eval-every", type=int, default=1, help="trainer.test_freq (default 1)")
    parser.add_argument("--tolerance", type=float, default=0.02, help="'reaches' = within this of the teacher")
    parser.add_argument("--png", type=Path, help="write a figure of both sides' curves there")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the runs (default 1)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    log = common.make_log("distill")

    def body() -> dict[str, Any]:
        if min(args.teacher_steps, args.student_steps, args.eval_every, args.seeds, args.distill_n or 1) < 1:
            raise common.BenchError(
                "--teacher-steps, --student-steps, --eval-every, --seeds and --distill-n must be >= 1"
            )
        if args.student_steps > args.teacher_steps:
            raise common.BenchError("--student-steps must not exceed --teacher-steps (rl's first seed is the teacher)")
        task = ["--preset", TASKS[args.task], f"trainer.test_freq={args.eval_every}"]
        seeds = list(range(args.first_seed, args.first_seed + args.seeds))
        rl: dict[int, dict[str, float]] = {}
        distill: dict[int, dict[str, float]] = {}
        walls: dict[str, float] = {}
        losses: dict[str, list[float]] = {}
        with common.work_dir("rlcore-distill-", args.keep, log) as root:
            ckpt = root / "ckpt"
            teacher = one_run(
                "teacher",
                [
                    *task,
                    *seed_overrides(seeds[0]),
                    f"trainer.total_training_steps={args.teacher_steps}",
                    f"trainer.save_freq={args.teacher_steps}",
                    f"trainer.default_local_dir={ckpt}",
                    f"{ARR}.actor.checkpoint.save_contents=[model,hf_model]",
                ],
                root,
                args.threads,
                log,
            )
            teacher_dir = ckpt / f"global_step_{args.teacher_steps}" / "actor" / "huggingface"
            steps = f"trainer.total_training_steps={args.student_steps}"
            for seed in seeds:
                if seed == seeds[0]:
                    rl[seed] = {k: v for k, v in teacher["val_by_step"].items() if int(k) <= args.student_steps}
                else:
                    run = one_run(f"rl-{seed}", [*task, *seed_overrides(seed), steps], root, args.threads, log)
                    rl[seed], walls[f"rl-{seed}"] = run["val_by_step"], run["wall_s"]
                run = one_run(
                    f"distill-{seed}",
                    [
                        *task,
                        *seed_overrides(seed),
                        steps,
                        "distillation.enabled=true",
                        f"distillation.teacher_models.teacher_model.model_path={teacher_dir}",
                        "distillation.distillation_loss.loss_mode=k1",
                        "distillation.distillation_loss.use_policy_gradient=true",
                        "distillation.distillation_loss.use_task_rewards=false",
                        *([f"{ARR}.rollout.n={args.distill_n}"] if args.distill_n else []),
                    ],
                    root,
                    args.threads,
                    log,
                )
                distill[seed], walls[f"distill-{seed}"] = run["val_by_step"], run["wall_s"]
                losses[str(seed)] = run["distillation_loss_by_step"]
        final = teacher["val_by_step"][max(teacher["val_by_step"], key=int)]
        threshold = round(final - args.tolerance, 4)
        sides = {
            "rl": learning_curve.summarise_side(rl, threshold, args.student_steps),
            "distill": learning_curve.summarise_side(distill, threshold, args.student_steps),
        }
        out: dict[str, Any] = {
            "task": args.task,
            "teacher_steps": args.teacher_steps,
            "student_steps": args.student_steps,
            "distill_n": args.distill_n,
            "seeds": seeds,
            "teacher": {"val_by_step": teacher["val_by_step"], "final": final, "wall_s": teacher["wall_s"]},
            "threshold": threshold,
            "sides": sides,
            "distillation_loss_by_step": losses,
            "wall_s_by_run": walls,
        }
        if args.png:
            title = f"{TASKS[args.task]}: distilled from the {args.teacher_steps}-step RL teacher vs RL"
            out["png"] = str(learning_curve.plot_curves(sides, threshold, title, args.png))
        return out

    return common.run_main("distill_curve", args.threads, body)


if __name__ == "__main__":
    sys.exit(main())
