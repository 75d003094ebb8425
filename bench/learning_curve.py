"""``vs_trl.py --curve``: greedy validation reward curves of ``rlcore run`` and TRL's ``GRPOTrainer``.

Not a script: ``vs_trl.py`` imports it (``import learning_curve``). Both frameworks train one bundled task
(a registered preset with a ``prepare`` step, such as ``arith-cpu``) from the task's warm-started model with
the settings the preset resolves to in rlcore, mapped onto TRL's ``GRPOConfig`` (:func:`trl_config_kwargs`;
``docs/vs-trl.md`` has the table). Everything a run needs comes from the preset's resolved config
(:func:`task_settings`), so the bench does not care how the task builds or ships its model.

Per seed the bench writes one training file whose row order is the seed's (per-epoch permutations of the
task's training rows, :func:`ordered_rows`); both sides read it unshuffled, so step ``t`` of either side
trains on the same prompts. The seed also sets rlcore's ``trainer.seed``, ``rollout.seed`` and
``actor.data_loader_seed`` and TRL's ``seed``. Both sides score the greedy responses to the task's validation
set every ``--eval-every`` steps, before the first step and after the last (rlcore: ``trainer.test_freq``
with ``val_kwargs`` greedy; TRL: :class:`GreedyValidation`, a callback that decodes greedily with
``model.generate`` and scores with the task's registered scorer).

Contents: the settings (:func:`task_settings`), the per-seed data, the TRL child (:func:`trl_curve_child`),
the rlcore command line (:func:`rlcore_curve_command`), the statistics across seeds (:func:`summarise_side`,
:func:`steps_to`), the figure (:func:`plot_curves`) and the driver (:func:`run_curves`).
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import common
from common import BenchError

#: ``--task`` names and the presets they train
TASKS: dict[str, str] = {"arith": "arith-cpu", "arith-chain": "arith-chain-cpu"}
KL_MODES = ("none", "low_var_kl")
log = common.make_log("vs_trl")


# ------------------------------------------------------------------------------------------- settings
def _one_file(value: Any, key: str) -> str:
    """The single file a config value names (a list of one is accepted)."""
    files = [value] if isinstance(value, str) else list(value or [])
    if len(files) != 1:
        raise BenchError(f"the task's {key} must name exactly one file, got {value!r}")
    return str(files[0])


def task_settings(task: str, kl: str, kl_coef: float | None) -> dict[str, Any]:
    """Resolve ``task``'s preset in rlcore, build its assets (data, warm-started model), return the settings
    (:func:`settings_from_config`)."""
    from rlcore.config.loader import load_config
    from rlcore.plugins import load_plugins
    from rlcore.run import prepare_presets

    if task not in TASKS:
        raise BenchError(f"unknown --task {task!r}: use {' or '.join(TASKS)}")
    preset = TASKS[task]
    manager = load_plugins()
    if not manager.registry.has("preset", preset):
        raise BenchError(f"preset {preset!r} of --task {task} is not registered")
    cfg = load_config([], [], [preset], manager)
    log(f"preparing the assets of preset {preset} (data and warm-started model)")
    prepare_presets(manager, [preset], cfg)
    return settings_from_config(cfg, task, kl, kl_coef)


def settings_from_config(cfg: Any, task: str, kl: str, kl_coef: float | None) -> dict[str, Any]:
    """What both frameworks are given, from ``task``'s resolved rlcore config ``cfg``.

    The model folder, the data files, the batch and update shape, the optimizer, clipping, the KL term
    (``kl`` overrides the preset: ``none`` or ``low_var_kl`` with ``kl_coef``, default the config's
    ``kl_loss_coef``), sampling and lengths. A config using something this comparison does not map
    (another estimator or loss aggregation, a learning-rate warm-up, a KL penalty in the reward) is an error
    naming the key.
    """
    if kl not in KL_MODES:
        raise BenchError(f"unknown --kl {kl!r}: use {' or '.join(KL_MODES)}")
    preset = TASKS[task]
    actor, rollout, optim = (
        cfg.actor_rollout_ref.actor,
        cfg.actor_rollout_ref.rollout,
        cfg.actor_rollout_ref.actor.optim,
    )
    unmapped = {
        "algorithm.adv_estimator": (cfg.algorithm.adv_estimator, "grpo"),
        "actor_rollout_ref.actor.loss_agg_mode": (actor.loss_agg_mode, "token-mean"),
        "actor_rollout_ref.actor.policy_loss.loss_mode": (
            actor.get("policy_loss", {}).get("loss_mode", "vanilla"),
            "vanilla",
        ),
        "algorithm.use_kl_in_reward": (bool(cfg.algorithm.use_kl_in_reward), False),
        "actor_rollout_ref.rollout.multi_turn.enable": (bool(rollout.multi_turn.enable), False),
        "actor_rollout_ref.actor.optim.lr_scheduler_type": (optim.lr_scheduler_type, "constant"),
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": (float(optim.lr_warmup_steps_ratio), 0.0),
        "actor_rollout_ref.rollout.val_kwargs.do_sample": (bool(rollout.val_kwargs.do_sample), False),
    }
    if int(optim.lr_warmup_steps) > 0:
        unmapped["actor_rollout_ref.actor.optim.lr_warmup_steps"] = (int(optim.lr_warmup_steps), "<= 0")
    wrong = [f"{key}={have!r} (mapped: {want!r})" for key, (have, want) in unmapped.items() if have != want]
    if wrong:
        raise BenchError(f"preset {preset} sets what --curve does not map onto TRL: {'; '.join(wrong)}")
    prompts, mini = int(cfg.data.train_batch_size), int(actor.ppo_mini_batch_size)
    if prompts % mini:
        raise BenchError(
            f"preset {preset}: data.train_batch_size {prompts} is not a multiple of ppo_mini_batch_size {mini}"
        )
    clip = float(actor.clip_ratio)
    coef = float(actor.kl_loss_coef) if kl_coef is None else float(kl_coef)
    return {
        "task": task,
        "preset": preset,
        "model": str(cfg.actor_rollout_ref.model.path),
        "train_file": _one_file(cfg.data.train_files, "data.train_files"),
        "val_file": _one_file(cfg.data.val_files, "data.val_files"),
        "prompts_per_step": prompts,
        "generations": int(rollout.n),
        "mini_batch_prompts": mini,
        "ppo_epochs": int(actor.ppo_epochs),
        "lr": float(optim.lr),
        "weight_decay": float(optim.weight_decay),
        "betas": [float(b) for b in optim.betas],
        "grad_clip": float(actor.grad_clip),
        "clip_low": float(actor.clip_ratio_low if actor.clip_ratio_low is not None else clip),
        "clip_high": float(actor.clip_ratio_high if actor.clip_ratio_high is not None else clip),
        "entropy_coeff": float(actor.entropy_coeff),
        "scale_by_std": bool(cfg.algorithm.get("norm_adv_by_std_in_grpo", True)),
        "kl": kl,
        "kl_coef": coef if kl != "none" else 0.0,
        "temperature": float(rollout.temperature),
        "top_p": float(rollout.top_p),
        "top_k": int(rollout.top_k),
        "max_prompt_length": int(cfg.data.max_prompt_length),
        "max_response_length": int(cfg.data.max_response_length),
        "preset_steps": int(cfg.trainer.total_training_steps),
        "preset_test_freq": int(cfg.trainer.test_freq),
    }


def optimizer_steps_per_rl_step(settings: dict[str, Any]) -> int:
    """Optimizer steps one RL step takes: mini-batches per step times PPO epochs (TRL counts these)."""
    return settings["prompts_per_step"] // settings["mini_batch_prompts"] * settings["ppo_epochs"]


def trl_config_kwargs(
    settings: dict[str, Any], seed: int, steps: int, out_dir: str, kl_bias_correction: bool
) -> dict[str, Any]:
    """``GRPOConfig`` keyword arguments equal to rlcore's settings (see ``docs/vs-trl.md`` for the mapping).

    One TRL "step" is one optimizer step, so the run has ``steps`` x mini-batches x epochs of them: the
    generation batch (``prompts_per_step`` x n) is cut into ``steps_per_generation`` mini-batches of
    ``per_device_train_batch_size`` completions, one optimizer step each (gradient accumulation 1), and
    reused ``num_iterations`` (= ``ppo_epochs``) times. ``loss_type="bnpo"`` divides each mini-batch's token
    sum by its own token count: verl's ``token-mean`` over one mini-batch. ``kl_bias_correction`` is TRL's
    ``use_bias_correction_kl`` (TRL's default true; verl's ``low_var_kl`` has no such factor).
    """
    mini_completions = settings["mini_batch_prompts"] * settings["generations"]
    per_step = settings["prompts_per_step"] // settings["mini_batch_prompts"]
    return {
        "output_dir": out_dir,
        "use_cpu": True,
        "bf16": False,
        "fp16": False,
        "model_init_kwargs": {"dtype": "float32"},
        "per_device_train_batch_size": mini_completions,
        "gradient_accumulation_steps": 1,
        "steps_per_generation": per_step,
        "num_iterations": settings["ppo_epochs"],
        "num_generations": settings["generations"],
        "max_completion_length": settings["max_response_length"],
        "shuffle_dataset": False,
        "learning_rate": settings["lr"],
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "weight_decay": settings["weight_decay"],
        "adam_beta1": settings["betas"][0],
        "adam_beta2": settings["betas"][1],
        "adam_epsilon": 1e-8,
        "max_grad_norm": settings["grad_clip"],
        "epsilon": settings["clip_low"],
        "epsilon_high": settings["clip_high"],
        "loss_type": "bnpo",
        "scale_rewards": "group" if settings["scale_by_std"] else "none",
        "beta": settings["kl_coef"],
        "use_bias_correction_kl": kl_bias_correction,
        "entropy_coef": settings["entropy_coeff"],
        "temperature": settings["temperature"],
        "top_p": settings["top_p"],
        "top_k": max(settings["top_k"], 0),
        "gradient_checkpointing": False,
        "max_steps": steps * optimizer_steps_per_rl_step(settings),
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "seed": seed,
        "data_seed": seed,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
    }


def rlcore_curve_overrides(
    settings: dict[str, Any], seed: int, steps: int, eval_every: int, train_file: Path, run_root: Path
) -> list[str]:
    """The ``rlcore run --preset <task>`` overrides of one seed's run: its data order and seeds, the step count,
    validation every ``eval_every`` steps and before the first, the KL setting, mini-batch shuffling (TRL
    shuffles every generation batch before cutting it into mini-batches), one micro-batch per mini-batch,
    no checkpoints and no trackers besides the metrics file."""
    arr = "actor_rollout_ref"
    kl = [f"{arr}.actor.use_kl_loss=false"]
    if settings["kl"] != "none":
        kl = [
            f"{arr}.actor.use_kl_loss=true",
            f"{arr}.actor.kl_loss_type={settings['kl']}",
            f"{arr}.actor.kl_loss_coef={settings['kl_coef']}",
        ]
    mini_completions = settings["mini_batch_prompts"] * settings["generations"]
    return [
        f"data.train_files={train_file}",
        "data.shuffle=false",
        f"trainer.total_training_steps={steps}",
        f"trainer.test_freq={eval_every}",
        "trainer.val_before_train=true",
        f"trainer.seed={seed}",
        f"{arr}.rollout.seed={seed}",
        f"{arr}.actor.shuffle=true",
        f"{arr}.actor.data_loader_seed={seed}",
        f"{arr}.actor.ppo_micro_batch_size_per_gpu={mini_completions}",
        *kl,
        "trainer.save_freq=-1",
        "trainer.logger=[]",
        "trainer.progress_bar=false",
        "trainer.device=cpu",
        f"trainer.runs_dir={run_root}",
        f"trainer.default_local_dir={run_root / 'ckpt'}",
    ]


# ----------------------------------------------------------------------------------------- the data
def read_rows(path: str) -> list[dict[str, Any]]:
    """The rows of a verl-schema parquet file (``prompt``, ``data_source``, ``reward_model``, ...)."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def ordered_rows(rows: Sequence[dict[str, Any]], count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` rows: permutations of ``rows`` (one per epoch, ``random.Random(seed * 1000 + epoch)``) end to end.

    Both frameworks read the result in order, so their step ``t`` trains on the same prompts.
    """
    if not rows:
        raise BenchError("the task has no training rows")
    out: list[dict[str, Any]] = []
    epoch = 0
    while len(out) < count:
        order = list(range(len(rows)))
        random.Random(seed * 1000 + epoch).shuffle(order)
        out.extend(rows[i] for i in order)
        epoch += 1
    return out[:count]


def write_seed_data(settings: dict[str, Any], seed: int, steps: int, work: Path) -> Path:
    """Write seed ``seed``'s training rows (parquet, for both sides) under ``work``; return the file."""
    from rlcore_plugin_tasks.warm_start import write_parquet

    rows = ordered_rows(read_rows(settings["train_file"]), steps * settings["prompts_per_step"], seed)
    path = work / f"train-seed{seed}.parquet"
    write_parquet(rows, path)
    return path


# ------------------------------------------------------------------------------------ the TRL child
def greedy_scores(
    model: Any, tokenizer: Any, rows: Sequence[dict[str, Any]], scorer: Callable[..., float], new_tokens: int
) -> list[float]:
    """Greedy responses of ``model`` to ``rows``' chat prompts (left-padded, one batch), each scored by ``scorer``."""
    import torch

    texts = [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in rows]
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    finally:
        tokenizer.padding_side = side
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out = model.generate(
            **enc,
            do_sample=False,
            max_new_tokens=new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    model.train(was_training)
    responses = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return [
        float(scorer(r["data_source"], text, r["reward_model"]["ground_truth"], r.get("extra_info")))
        for r, text in zip(rows, responses)
    ]


def trl_curve_child(work: Path, seed: int, steps: int, eval_every: int, out: Path, kl_bias_correction: bool) -> None:
    """Train seed ``seed`` with TRL's GRPOTrainer on ``work``'s settings and data; write its curve to ``out``.

    ``out`` gets ``{"val": {step: greedy validation reward}, "train_reward": [mean sampled reward per RL
    step], "versions": ...}``; steps are RL steps (one generation batch each).
    """
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlcore.plugins import load_plugins

    settings = json.loads((work / "settings.json").read_text())
    registry = load_plugins().registry
    val_rows = read_rows(settings["val_file"])
    scorers = {s: registry.load("reward_scorer", s) for s in {r["data_source"] for r in val_rows}}

    def score(data_source: str, text: str, ground_truth: str, extra_info: Any = None) -> float:
        """The task's registered scorer for ``data_source``."""
        if data_source not in scorers:
            scorers[data_source] = registry.load("reward_scorer", data_source)
        return float(scorers[data_source](data_source, text, ground_truth, extra_info))

    train_rows = read_rows(str(work / f"train-seed{seed}.parquet"))
    dataset = Dataset.from_list(
        [
            {"prompt": r["prompt"], "ground_truth": r["reward_model"]["ground_truth"], "data_source": r["data_source"]}
            for r in train_rows
        ]
    )
    train_reward: list[float] = []

    def reward(completions: list[Any], ground_truth: list[str], data_source: list[str], **kwargs: Any) -> list[float]:
        """TRL's reward function: the task's scorer on each completion's text."""
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        scores = [score(s, t, g) for s, t, g in zip(data_source, texts, ground_truth)]
        train_reward.append(sum(scores) / len(scores))
        return scores

    per_rl_step = optimizer_steps_per_rl_step(settings)
    val: dict[int, float] = {}

    class GreedyValidation(TrainerCallback):
        """The greedy validation reward before training and after every ``eval_every``-th and the last RL step."""

        def _validate(self, rl_step: int, model: Any, tokenizer: Any) -> None:
            """Score the greedy responses to the validation rows at ``rl_step``."""
            scores = greedy_scores(model, tokenizer, val_rows, score, settings["max_response_length"])
            val[rl_step] = sum(scores) / len(scores)
            log(f"trl seed {seed}: step {rl_step}: greedy validation reward {val[rl_step]:.3f}")

        def on_train_begin(
            self, args: Any, state: Any, control: Any, model: Any = None, processing_class: Any = None, **kwargs: Any
        ) -> None:
            """Validate the warm-started model (step 0)."""
            self._validate(0, model, processing_class)

        def on_step_end(
            self, args: Any, state: Any, control: Any, model: Any = None, processing_class: Any = None, **kwargs: Any
        ) -> None:
            """Validate after every ``eval_every``-th RL step and after the last."""
            if state.global_step % per_rl_step:
                return
            rl_step = state.global_step // per_rl_step
            if rl_step % eval_every == 0 or rl_step == steps:
                self._validate(rl_step, model, processing_class)

    config = GRPOConfig(**trl_config_kwargs(settings, seed, steps, str(work / f"trl-out-{seed}"), kl_bias_correction))
    trainer = GRPOTrainer(
        model=settings["model"], reward_funcs=reward, args=config, train_dataset=dataset, callbacks=[GreedyValidation()]
    )
    trainer.train()
    result = {
        "val": {str(k): v for k, v in sorted(val.items())},
        "train_reward": train_reward,
        "versions": common.trl_versions(),
    }
    out.write_text(json.dumps(result))


# ------------------------------------------------------------------------------------- rlcore's side
def read_rlcore_curve(run_root: Path, data_source: str) -> dict[str, Any]:
    """The greedy validation reward by step and the training reward per step of the run under ``run_root``."""
    files = sorted(run_root.glob("*/*/metrics.jsonl"))
    if len(files) != 1:
        raise BenchError(f"expected one rlcore run under {run_root}, found {len(files)} metrics.jsonl files")
    rows = [json.loads(line) for line in files[0].read_text().splitlines() if line.strip()]
    key = f"val-core/{data_source}/reward/mean@1"
    val = {str(r["step"]): float(r[key]) for r in rows if r.get(key) is not None}
    if not val:
        raise BenchError(f"{files[0]} holds no {key}: did the run validate?")
    train = [float(r["critic/score/mean"]) for r in rows if r.get("critic/score/mean") is not None]
    return {
        "val": dict(sorted(val.items(), key=lambda kv: int(kv[0]))),
        "train_reward": train,
        "run_dir": str(files[0].parent),
    }


# ---------------------------------------------------------------------------------------- statistics
def steps_to(curve: dict[str, float], threshold: float) -> int | None:
    """The first step whose validation reward is at least ``threshold`` (None: never)."""
    for step, value in sorted(curve.items(), key=lambda kv: int(kv[0])):
        if value >= threshold:
            return int(step)
    return None


def spread(values: Sequence[float]) -> dict[str, float]:
    """Mean, standard deviation (0 for one value), min and max of ``values``, rounded to 4 decimals."""
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {
        k: round(v, 4)
        for k, v in (("mean", statistics.fmean(values)), ("std", std), ("min", min(values)), ("max", max(values)))
    }


def summarise_side(curves: dict[int, dict[str, float]], threshold: float, steps: int) -> dict[str, Any]:
    """One framework's curves across seeds: per-step spread, steps-to-``threshold`` and the final reward.

    ``curves`` maps a seed to its ``{step: reward}``; only steps every seed has are summarised. A seed that
    never reaches the threshold counts as ``steps`` + 1 in the mean (and is listed as null).
    """
    common_steps = sorted(set.intersection(*(set(int(s) for s in c) for c in curves.values())))
    per_step = {str(s): spread([curves[seed][str(s)] for seed in curves]) for s in common_steps}
    reached = {str(seed): steps_to(c, threshold) for seed, c in curves.items()}
    counted = [v if v is not None else steps + 1 for v in reached.values()]
    last = str(common_steps[-1])
    return {
        "steps": common_steps,
        "per_step": per_step,
        "steps_to_threshold": {
            "per_seed": reached,
            "reached": sum(v is not None for v in reached.values()),
            **spread(counted),
        },
        "final_reward": spread([curves[seed][last] for seed in curves]),
        "per_seed": {str(seed): c for seed, c in curves.items()},
    }


def verdict(trl: dict[str, Any], rlcore: dict[str, Any]) -> dict[str, Any]:
    """How rlcore's curves compare with TRL's: the difference of the mean steps-to-threshold, whether rlcore's
    mean is at most TRL's, and whether the seed ranges of steps-to-threshold and of the final reward overlap
    (overlapping ranges: no difference beyond seed noise at this number of seeds)."""
    a, b = rlcore["steps_to_threshold"], trl["steps_to_threshold"]
    return {
        "rlcore_mean_steps_minus_trl": round(a["mean"] - b["mean"], 2),
        "rlcore_at_least_as_fast": a["mean"] <= b["mean"],
        "steps_to_threshold_ranges_overlap": a["min"] <= b["max"] and b["min"] <= a["max"],
        "final_reward_ranges_overlap": (
            rlcore["final_reward"]["min"] <= trl["final_reward"]["max"]
            and trl["final_reward"]["min"] <= rlcore["final_reward"]["max"]
        ),
    }


# ---------------------------------------------------------------------------------------------- plot
def draw_curves(
    ax: Any, sides: dict[str, dict[str, Any]], threshold: float | None, ylabel: str, xlabel: str, title: str
) -> None:
    """Draw each side's per-step mean (:func:`summarise_side`) with its min-max band across seeds on ``ax``, a
    dashed line at ``threshold`` (None: none), the axis labels, ``title`` and the legend."""
    from matplotlib.ticker import MaxNLocator

    colours = {"rlcore": "tab:blue", "trl": "tab:orange"}
    for name, side in sides.items():
        xs = side["steps"]
        stats = [side["per_step"][str(s)] for s in xs]
        seeds = len(side["per_seed"])
        (line,) = ax.plot(
            xs,
            [s["mean"] for s in stats],
            marker="o",
            color=colours.get(name),
            label=f"{name} (mean of {seeds} seeds)",
        )
        ax.fill_between(xs, [s["min"] for s in stats], [s["max"] for s in stats], color=line.get_color(), alpha=0.2)
    if threshold is not None:
        ax.axhline(threshold, color="grey", linestyle="--", linewidth=0.8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")


def plot_curves(sides: dict[str, dict[str, Any]], threshold: float, title: str, png: Path) -> Path:
    """Draw each side's mean greedy validation reward with its min-max band across seeds; save ``png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    try:
        draw_curves(ax, sides, threshold, "greedy validation reward", "RL step (one generation batch)", title)
        png.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(png, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)
    return png


# ---------------------------------------------------------------------------------------------- driver
def _rlcore_run(settings: dict[str, Any], seed: int, args: Any, work: Path, env: dict[str, str]) -> dict[str, Any]:
    """One rlcore run of ``seed``; its curve."""
    run_root = work / f"rlcore-runs-{seed}"
    overrides = rlcore_curve_overrides(
        settings, seed, args.steps, args.eval_every, work / f"train-seed{seed}.parquet", run_root
    )
    cmd = [sys.executable, "-m", "rlcore", "run", "--preset", settings["preset"], *overrides]
    log(f"rlcore seed {seed}: {args.steps} steps (log {work / f'rlcore-{seed}.log'})")
    child = common.run_checked(cmd, env, work / f"rlcore-{seed}.log", f"rlcore seed {seed}")
    val_rows = read_rows(settings["val_file"])
    curve = read_rlcore_curve(run_root, val_rows[0]["data_source"])
    log(
        f"rlcore seed {seed}: done in {child.wall_s:.0f} s, final greedy validation reward {list(curve['val'].values())[-1]:.3f}"
    )
    return curve


def _trl_run(seed: int, args: Any, work: Path, env: dict[str, str], script: Path) -> dict[str, Any]:
    """One TRL run of ``seed`` in a fresh process; its curve."""
    out = work / f"trl-{seed}.json"
    cmd = [
        sys.executable,
        str(script),
        "--child",
        "trl-curve",
        "--work",
        str(work),
        "--seed-value",
        str(seed),
        "--steps",
        str(args.steps),
        "--eval-every",
        str(args.eval_every),
        "--child-out",
        str(out),
        *(["--trl-kl-bias-correction"] if args.trl_kl_bias_correction else []),
    ]
    log(f"trl seed {seed}: {args.steps} steps (log {work / f'trl-{seed}.log'})")
    child = common.run_checked(cmd, env, work / f"trl-{seed}.log", f"trl seed {seed}")
    curve = json.loads(out.read_text())
    log(
        f"trl seed {seed}: done in {child.wall_s:.0f} s, final greedy validation reward {list(curve['val'].values())[-1]:.3f}"
    )
    return curve


def check_curve_args(args: Any) -> None:
    """Errors for a bad ``--curve`` command line (before anything is built)."""
    if args.task not in TASKS:
        raise BenchError(f"unknown --task {args.task!r}: use {' or '.join(TASKS)}")
    if args.kl not in KL_MODES:
        raise BenchError(f"unknown --kl {args.kl!r}: use {' or '.join(KL_MODES)}")
    for name in ("seeds", "first_seed", "jobs"):
        if getattr(args, name) < 1:
            raise BenchError(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("steps", "eval_every"):
        if (getattr(args, name) or 0) < 0:
            raise BenchError(f"--{name.replace('_', '-')} must be >= 1 (0 or unset: the preset's)")
    if not 0 < args.threshold <= 1:
        raise BenchError("--threshold must be in (0, 1]")
    if args.kl_coef is not None and (args.kl_coef < 0 or not math.isfinite(args.kl_coef)):
        raise BenchError("--kl-coef must be a finite number >= 0")
    common.check_modules(
        [("trl", "bench"), ("datasets", "bench"), ("rlcore", "train"), ("torch", "train"), ("matplotlib", "train")]
    )


def run_curves(args: Any, script: Path) -> dict[str, Any]:
    """Every seed of both frameworks (``--jobs`` runs at a time); the JSON result and the figure."""
    from importlib.metadata import version

    check_curve_args(args)
    env = common.bench_env(args.threads)
    settings = task_settings(args.task, args.kl, args.kl_coef)
    args.steps = args.steps or settings["preset_steps"]
    args.eval_every = args.eval_every or settings["preset_test_freq"]
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    with common.work_dir("rlcore_vs_trl_curve_", args.keep, log) as work:
        (work / "settings.json").write_text(json.dumps(settings))
        for seed in seeds:
            write_seed_data(settings, seed, args.steps, work)
        jobs = [("trl", s) for s in seeds] + [("rlcore", s) for s in seeds]
        jobs.sort(key=lambda job: (job[1], job[0]))  # alternate sides so that a slow patch hits both

        def run(job: tuple[str, int]) -> dict[str, Any]:
            side, seed = job
            if side == "trl":
                return _trl_run(seed, args, work, env, script)
            return _rlcore_run(settings, seed, args, work, env)

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            results = dict(zip(jobs, pool.map(run, jobs)))
    sides = {
        side: summarise_side({s: results[(side, s)]["val"] for s in seeds}, args.threshold, args.steps)
        for side in ("trl", "rlcore")
    }
    for side in sides:
        sides[side]["train_reward_per_seed"] = {
            str(s): [round(x, 4) for x in results[(side, s)]["train_reward"]] for s in seeds
        }
    kl_text = "no KL" if args.kl == "none" else f"{args.kl} KL, coef {settings['kl_coef']}"
    title = f"{settings['preset']}: greedy validation reward, {args.seeds} seeds per side, {kl_text}"
    png = (
        Path(args.png)
        if args.png
        else Path(script).resolve().parent / "figures" / f"vs_trl_curve_{args.task}_{args.kl}.png"
    )
    plot_curves(sides, args.threshold, title, png)
    versions = results[("trl", seeds[0])]["versions"]
    versions["rlcore"] = version("rlcore")
    return {
        "versions": versions,
        "curve": {
            "task": args.task,
            "preset": settings["preset"],
            "kl": args.kl,
            "steps": args.steps,
            "eval_every": args.eval_every,
            "seeds": seeds,
            "threshold": args.threshold,
            "trl_kl_bias_correction": args.trl_kl_bias_correction,
            "settings": settings,
            "trl_config": {
                k: v
                for k, v in trl_config_kwargs(settings, 0, args.steps, "", args.trl_kl_bias_correction).items()
                if k not in ("output_dir", "seed", "data_seed")
            },
            "trl": sides["trl"],
            "rlcore": sides["rlcore"],
            "verdict": verdict(sides["trl"], sides["rlcore"]),
            "png": str(png),
        },
    }
