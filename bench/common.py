"""What ``bench/vs_trl.py`` and ``bench/step_breakdown.py`` share: the work, the rlcore run, child processes.

Not a script: both benchmarks import it as ``import common``. They are run as ``python bench/<script>.py``,
which puts ``bench/`` first on ``sys.path``; each script also adds its own directory to ``sys.path`` before
the import, so ``import common`` works however the script is loaded (``runpy``, an import from a test).

Contents:

- the two work sizes (:data:`SIZES`) and :func:`prepare_work`, which builds the model and tokenizer
  (``rlcore_testkit.tiny``), the prompts (JSON for TRL, verl-schema parquet for rlcore) and ``reward.py``;
- :func:`rlcore_overrides` / :func:`rlcore_command`: the ``rlcore run`` command line for a size, executor
  and number of worker processes;
- :func:`run_child` / :func:`run_checked`: a fresh process with its output in a log file, its wall time
  and peak RSS (``os.wait4``);
- :func:`read_metrics`, :func:`series`, :func:`prefixed_series`, :func:`pool`, :func:`median`: the
  per-step rows of a run's ``metrics.jsonl``, warm-up steps left out, and their medians;
- :func:`bench_env` (``--threads`` via ``OMP_NUM_THREADS``), argument checks, the work directory, and
  :func:`run_main`, which prints the one JSON object or a one-line error with exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the two work sizes: model shape, prompts per step, generations per prompt, new tokens, and the default
#: run length (steps per run, first steps left out of the medians)
SIZES: dict[str, dict[str, Any]] = {
    "tiny": {
        "model": {"hidden_size": 64, "intermediate_size": 128, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1},
        "prompts": 2,
        "generations": 4,
        "new_tokens": 32,
        "steps": 20,
        "warmup": 2,
    },
    "small": {
        "model": {"hidden_size": 512, "intermediate_size": 1408, "num_layers": 8, "num_heads": 8, "num_kv_heads": 4},
        "prompts": 8,
        "generations": 4,
        "new_tokens": 128,
        "steps": 5,
        "warmup": 1,
    },
}
#: the mixture-of-experts variant of each size (``--moe``): the same attention, every layer sparse with 8
#: experts of a quarter of the dense MLP's width, each token routed to 2 (the active MLP is half the dense one)
MOE_SHAPES: dict[str, dict[str, Any]] = {
    "tiny": {"moe_intermediate_size": 32, "num_experts": 8, "top_k": 2},
    "small": {"moe_intermediate_size": 352, "num_experts": 8, "top_k": 2},
}
LEARNING_RATE = 1e-4
DATASET_ROWS = 64
DATA_SOURCE = "bench/digits"

#: written into the work dir; rlcore loads ``compute_score``, TRL ``trl_reward``: the same scorer
REWARD_PY = '''"""The benchmark reward: 1 for the right final number, plus 0.5 x the fraction of digits."""
import re


def score_text(text, answer):
    """Correctness (1.0) plus a dense shaping term so that group rewards vary for a random model."""
    if not text:
        return 0.0
    numbers = re.findall(r"\\d+", text)
    correct = 1.0 if numbers and numbers[-1] == str(answer) else 0.0
    return correct + 0.5 * sum(ch.isdigit() for ch in text) / len(text)


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """rlcore's custom reward function."""
    return score_text(solution_str, ground_truth)


def trl_reward(completions, answer, **kwargs):
    """TRL's reward function (conversational completions)."""
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [score_text(t, a) for t, a in zip(texts, answer)]
'''


class BenchError(Exception):
    """A problem with the benchmark's input or environment, reported as one line (exit status 2)."""


def trl_versions() -> dict[str, str]:
    """The versions of torch, transformers, TRL and datasets in this process (a TRL child reports them)."""
    import datasets
    import torch
    import transformers
    import trl

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "datasets": datasets.__version__,
    }


def make_log(tag: str) -> Callable[[str], None]:
    """A progress printer for one script: ``[tag] message`` on stderr (stdout carries only the JSON)."""

    def log(message: str) -> None:
        """Print ``message`` on stderr."""
        print(f"[{tag}] {message}", file=sys.stderr, flush=True)

    return log


# --------------------------------------------------------------------------------------------- the work
def batch_size(size: str) -> int:
    """Completions per step of ``size`` (prompts x generations)."""
    return SIZES[size]["prompts"] * SIZES[size]["generations"]


def make_prompts(n: int = DATASET_ROWS, seed: int = 0) -> list[dict[str, str]]:
    """``n`` word problems as ``{"content", "answer"}`` (user message and the expected number)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(10, 50), rng.randint(10, 50)
        rows.append({"content": f"john has {a} apples and mary gave {b} more. how many?", "answer": str(a + b)})
    return rows


def sized_model_dir(folder: Path, hidden: int, layers: int) -> Path:
    """A tiny Qwen2 model in ``folder`` of width ``hidden`` and ``layers`` layers (no download): MLP 4x wide, one
    head per 64 of width, one KV head; what the weight-sync benchmarks size with ``--hidden`` and ``--layers``."""
    from rlcore_testkit.tiny import make_tiny_model_dir

    return make_tiny_model_dir(
        folder,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_layers=layers,
        num_heads=max(1, hidden // 64),
        num_kv_heads=1,
    )


def _moe_shape(size: str) -> dict[str, Any]:
    """The Qwen3-MoE shape of ``size`` (:data:`MOE_SHAPES`), as :func:`rlcore_testkit.tiny.build_moe_model` takes it."""
    dense = dict(SIZES[size]["model"])
    dense.pop("intermediate_size")
    return {**dense, **MOE_SHAPES[size]}


def prepare_work(work: Path, size: str, *, moe: bool = False) -> dict[str, Any]:
    """Build the model (with ``moe``, a Qwen3-MoE of :data:`MOE_SHAPES`), tokenizer, prompts (JSON +
    verl-schema parquet) and ``reward.py`` under ``work``.

    Returns facts about the work: parameter count, the model shape and the longest templated prompt in
    tokens (rlcore pads prompts to ``data.max_prompt_length``, which is set to exactly that).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    from rlcore_testkit.tiny import build_model, build_moe_model, build_tokenizer

    spec = SIZES[size]
    work.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    shape = _moe_shape(size) if moe else spec["model"]
    model = build_moe_model(tokenizer, **shape) if moe else build_model(tokenizer, **shape)
    model_dir = work / "model"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    prompts = make_prompts()
    (work / "prompts.json").write_text(json.dumps(prompts))
    rows = [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": p["content"]}],
            "reward_model": {"style": "rule", "ground_truth": p["answer"]},
            "extra_info": {"split": "train", "index": i},
        }
        for i, p in enumerate(prompts)
    ]
    pq.write_table(pa.Table.from_pylist(rows), work / "train.parquet")
    (work / "reward.py").write_text(REWARD_PY)
    lengths = [
        len(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p["content"]}],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
            )
        )
        for p in prompts
    ]
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "shape": dict(shape, vocab_size=model.config.vocab_size, head_dim=model.config.head_dim),
        "prompt_tokens_max": max(lengths),
        "prompt_tokens_mean": round(sum(lengths) / len(lengths), 2),
    }


def work_summary(size: str, facts: dict[str, Any]) -> dict[str, Any]:
    """The JSON description of one step's work of ``size`` (``facts`` from :func:`prepare_work`)."""
    spec = SIZES[size]
    return {
        "model": {"params": facts["params"], **facts["shape"]},
        "prompts_per_step": spec["prompts"],
        "generations_per_prompt": spec["generations"],
        "completions_per_step": batch_size(size),
        "new_tokens": spec["new_tokens"],
        "prompt_tokens_max": facts["prompt_tokens_max"],
        "learning_rate": LEARNING_RATE,
    }


# ------------------------------------------------------------------------------------------ the rlcore run
def rlcore_overrides(
    work: Path, size: str, steps: int, prompt_len: int, run_root: Path, executor: str = "local", workers: int = 1
) -> list[str]:
    """The ``rlcore run`` key=value overrides for the work of ``size`` (the same work as ``vs_trl``'s TRL run).

    ``executor`` is ``local`` or ``ray``; ``workers`` is ``trainer.n_gpus_per_node`` (worker processes on
    CPU). With several workers the batch is split over the ranks and each rank keeps one micro-batch.
    """
    spec = SIZES[size]
    micro = batch_size(size) // workers
    return [
        f"data.train_files={work / 'train.parquet'}",
        "data.val_files=null",
        f"data.train_batch_size={spec['prompts']}",
        f"data.max_prompt_length={prompt_len}",
        f"data.max_response_length={spec['new_tokens']}",
        f"actor_rollout_ref.model.path={work / 'model'}",
        f"custom_reward_function.path={work / 'reward.py'}",
        "custom_reward_function.name=compute_score",
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=false",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        "actor_rollout_ref.rollout.name=hf",
        f"actor_rollout_ref.rollout.n={spec['generations']}",
        "actor_rollout_ref.rollout.temperature=1.0",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={spec['prompts']}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.grad_clip=1.0",
        f"actor_rollout_ref.actor.optim.lr={LEARNING_RATE}",
        "actor_rollout_ref.actor.optim.weight_decay=0.0",
        "actor_rollout_ref.actor.optim.lr_scheduler_type=constant",
        f"trainer.total_training_steps={steps}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.save_freq=-1",
        "trainer.logger=[console]",
        "trainer.device=cpu",
        f"trainer.executor={executor}",
        f"trainer.n_gpus_per_node={workers}",
        "trainer.progress_bar=false",
        f"trainer.runs_dir={run_root}",
        f"trainer.default_local_dir={run_root / 'ckpt'}",
    ]


def rlcore_command(overrides: list[str]) -> list[str]:
    """``python -m rlcore run`` with ``overrides`` (see :func:`rlcore_overrides`), in this interpreter."""
    return [sys.executable, "-m", "rlcore", "run", *overrides]


def read_metrics(run_root: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The single run directory under ``run_root`` and its train-step rows (those with ``timing_s/step``)."""
    files = sorted(run_root.glob("*/*/metrics.jsonl"))
    if len(files) != 1:
        raise BenchError(f"expected one rlcore run under {run_root}, found {len(files)} metrics.jsonl files")
    rows = [json.loads(line) for line in files[0].read_text().splitlines() if line.strip()]
    return files[0].parent, [r for r in rows if r.get("timing_s/step") is not None]


def series(rows: list[dict[str, Any]], key: str) -> list[float]:
    """The values of ``key`` over ``rows`` (rows without it are skipped)."""
    return [float(r[key]) for r in rows if r.get(key) is not None]


def prefixed_series(rows: list[dict[str, Any]], prefix: str, exclude: Sequence[str] = ()) -> dict[str, list[float]]:
    """``{name: values}`` for every key ``<prefix><name>`` (one level, no further ``/``) not in ``exclude``.

    A step without the key counts as 0 (``timing_worker_s/compute_log_prob`` is absent from on-policy
    steps; a stage not run in a step took no time in it).
    """
    names = sorted({k.removeprefix(prefix) for r in rows for k in r if k.startswith(prefix)} - set(exclude))
    return {n: [float(r.get(prefix + n) or 0.0) for r in rows] for n in names if "/" not in n}


def median(values: Sequence[float], digits: int = 5) -> float | None:
    """The median of ``values`` rounded to ``digits`` decimals (None when there are none)."""
    return round(statistics.median(values), digits) if values else None


def pool(per_run: Iterable[Sequence[float]], warmup: int, required: bool = False) -> list[float]:
    """The values of every run after its first ``warmup``, in one list; with ``required`` an error when empty."""
    values = [float(v) for run in per_run for v in list(run)[warmup:]]
    if required and not values:
        raise BenchError(f"no timed steps left after dropping {warmup} warm-up steps; raise --steps")
    return values


# -------------------------------------------------------------------------------------- child processes
@dataclass
class ChildRun:
    """How a child process ended: exit status, wall seconds, peak RSS (MB) and its log file."""

    status: int
    wall_s: float
    peak_rss_mb: float
    log_file: Path


def run_child(cmd: list[str], env: dict[str, str], log_file: Path) -> ChildRun:
    """Run ``cmd`` with stdout and stderr to ``log_file``; its peak RSS is ``ru_maxrss`` from ``os.wait4``.

    The RSS is the child's own (and its waited-for descendants'): Ray's worker processes are started by
    the raylet, not by the child, and are not included.
    """
    start = time.perf_counter()
    with log_file.open("w") as handle:
        proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return ChildRun(proc.returncode, time.perf_counter() - start, usage.ru_maxrss / 1024, log_file)


def run_checked(cmd: list[str], env: dict[str, str], log_file: Path, what: str) -> ChildRun:
    """:func:`run_child`, raising :class:`BenchError` with the log's last lines when it fails."""
    result = run_child(cmd, env, log_file)
    if result.status != 0:
        tail = "\n".join(log_file.read_text().splitlines()[-15:])
        raise BenchError(f"{what} failed (exit {result.status}); log {log_file}:\n{tail}")
    return result


def bench_env(threads: int, **extra: str) -> dict[str, str]:
    """This process's environment, offline, quiet, with ``OMP_NUM_THREADS``/``MKL_NUM_THREADS=threads``.

    ``threads=0`` leaves the thread variables as they are (torch's default; Ray's workers get 1 unless
    ``OMP_NUM_THREADS`` is set). On a small or shared machine more OpenMP threads than free cores make
    every torch op wait for descheduled threads, so the scripts default to 1.
    """
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONWARNINGS="ignore",
        **extra,
    )
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


# ----------------------------------------------------------------------------------- command line, main
def add_run_args(
    parser: argparse.ArgumentParser, steps_default: int, steps_help: str, warmup_default: int | None, warmup_help: str
) -> None:
    """The options both scripts have: ``--steps``, ``--warmup``, ``--threads`` and ``--keep``."""
    parser.add_argument("--steps", type=int, default=steps_default, help=steps_help)
    parser.add_argument("--warmup", type=int, default=warmup_default, help=warmup_help)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per process via OMP_NUM_THREADS, Ray workers included "
        "(default 1; 0 = leave unset: torch's default, Ray's 1 in Ray workers)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (model, logs, run dirs)")


def check_sizes(value: str, allow_both: bool, option: str = "--size") -> list[str]:
    """The sizes named by ``option`` (``both`` = all when ``allow_both``); an error for an unknown one."""
    if allow_both and value == "both":
        return list(SIZES)
    if value not in SIZES:
        names = [*SIZES, "both"] if allow_both else list(SIZES)
        raise BenchError(f"unknown {option} {value!r}: use {', '.join(names[:-1])} or {names[-1]}")
    return [value]


def check_non_negative(args: argparse.Namespace, *names: str) -> None:
    """An error unless every option in ``names`` (attribute names; None = its default) is >= 0."""
    bad = [n for n in names if (getattr(args, n) or 0) < 0]
    if bad:
        raise BenchError(f"{', '.join('--' + n for n in bad)} must be >= 0")


def run_length(size: str, steps: int, warmup: int | None) -> tuple[int, int]:
    """Steps per run and warm-up steps for ``size`` (0 / None = the size's default); an error unless steps > warmup."""
    steps = steps or SIZES[size]["steps"]
    warmup = SIZES[size]["warmup"] if warmup is None else warmup
    if steps <= warmup:
        raise BenchError(f"--steps ({steps}) must be larger than the warm-up steps left out ({warmup})")
    return steps, warmup


def check_modules(modules: Sequence[tuple[str, str]]) -> None:
    """An error naming the install command for the first ``(module, pip extra)`` that is not importable."""
    for module, extra in modules:
        if importlib.util.find_spec(module) is None:
            raise BenchError(f"{module} is not installed: pip install -e '.[{extra}]'")


@contextmanager
def work_dir(prefix: str, keep: bool, log: Callable[[str], None]) -> Iterator[Path]:
    """A fresh temporary directory, removed afterwards unless ``keep`` (then its path is logged)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield root
    finally:
        if keep:
            log(f"work directory kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def machine_info(threads: int, load_start: float) -> dict[str, Any]:
    """CPU count, ``OMP_NUM_THREADS`` used (None = unset) and the 1-minute load average at start and now."""
    return {
        "cpus": os.cpu_count(),
        "omp_num_threads": threads or None,
        "loadavg_1m_start": round(load_start, 2),
        "loadavg_1m_end": round(os.getloadavg()[0], 2),
    }


def run_main(benchmark: str, threads: int, body: Callable[[], dict[str, Any]]) -> int:
    """Run ``body`` and print ``{"benchmark", "machine", "wall_s", **its result}`` as the one JSON object on
    stdout (exit 0), or ``error: <message>`` on stderr for a :class:`BenchError` (exit 2). Whatever the body
    prints goes to stderr (libraries imported on the way, such as DeepSpeed through accelerate, log to
    stdout), so stdout holds the JSON only."""
    load_start = os.getloadavg()[0]
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            result = body()
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = {
        "benchmark": benchmark,
        "machine": machine_info(threads, load_start),
        "wall_s": round(time.perf_counter() - started, 1),
        **result,
    }
    print(json.dumps(out, indent=2))
    return 0
