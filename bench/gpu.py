"""rlcore on one GPU in one command: generation speed, a real-size training step with MFU and peak memory per
stage, and the bundled task's first run — one JSON document on stdout, within a fixed time budget.

    python bench/gpu.py [--device cuda|cpu] [--size 1.7b|tiny] [--parts gen,train,bundled] [--budget S]
                        [--wheels DIR] [--out-dir DIR] [--threads N] [--keep]

Parts, each in its own child process under its own time limit (a share of what is left of ``--budget``, so
one slow part cannot eat the others; a part stopped at its limit reports what it had measured):

- ``build`` (always first): a tokenizer trained on the bundled GSM8K rows (``bench/data/gsm8k``) and a
  random-init model (``--size 1.7b``: Qwen3-1.7B's exact shape in bf16; ``tiny``: ``rlcore_testkit.tiny``),
  and the GSM8K parquet files (``rlcore data gsm8k``) — see ``bench/gpu_work.py``;
- ``gen``: rlcore's HF rollout engine against ``model.generate`` on the same rows, lengths and sampling;
- ``train``: the seed's verl command (``bench/data/seed-command.txt``) as written, entry point
  ``python -m rlcore run``, with only what a user appends through its ``$@`` (:func:`train_overrides`): step
  time and its ``timing_s/*`` breakdown, ``perf/mfu/*`` and ``perf/max_memory_*_gb/*`` from ``metrics.jsonl``;
- ``bundled``: the first ``rlcore run trainer.device=<device>`` with an empty cache (the warm start
  included): wall time, time to the first step and the validation reward curve.

``--wheels DIR`` installs every wheel under DIR (``pip install --no-index --no-deps --target``) and runs the
children with it first on ``PYTHONPATH``: how rlcore travels to a GPU machine without a package index
(``bench/gpu_wheels.sh`` builds the folder; bench/README.md). ``--out-dir`` receives ``gpu.json`` (rewritten
after every part, so that a hard kill still leaves the parts done) and each part's log. Every field of the
JSON is described in bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
SEED_FILE = BENCH_DIR / "data" / "seed-command.txt"
GSM8K_DIR = BENCH_DIR / "data" / "gsm8k"
PARTS = ("gen", "train", "bundled")
#: each part's share of the budget left when it starts (normalised over the parts still to run)
SHARES = {"build": 0.1, "gen": 0.3, "train": 0.35, "bundled": 0.25}
#: seconds kept back from the budget for stopping children and writing the JSON
RESERVE_S = 10.0
#: per size: default budget, generation rows x tokens, the training work, the bundled run's extra keys
SIZES: dict[str, dict[str, Any]] = {
    "1.7b": {
        "budget": 480,
        "gen_rows": 64,
        "response_length": 256,
        "train_prompts": 160,
        "train_steps": 2,
        "val_prompts": 64,
        "train_extra": [],
        "bundled": [],
    },
    "tiny": {
        "budget": 240,
        "gen_rows": 8,
        "response_length": 16,
        "train_prompts": 80,
        "train_steps": 2,
        "val_prompts": 16,
        "train_extra": ["data.max_prompt_length=256"],
        "bundled": ["trainer.total_training_steps=2", "trainer.test_freq=1"],
    },
}
log = common.make_log("gpu")


class Stopped(Exception):
    """The benchmark itself received SIGTERM or SIGINT: the parts not run are reported as skipped."""


# -------------------------------------------------------------------------------------------- child processes
class GpuSampler:
    """``nvidia-smi`` sampling the GPU's utilisation and used memory every 0.5 s while a part runs (no-op
    without ``nvidia-smi``)."""

    def __init__(self, path: Path) -> None:
        """Start sampling into ``path``."""
        self.path = path
        self.proc: subprocess.Popen[bytes] | None = None
        if shutil.which("nvidia-smi"):
            query = ["--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-lms", "500"]
            with path.open("w") as handle:
                self.proc = subprocess.Popen(["nvidia-smi", *query], stdout=handle, stderr=subprocess.DEVNULL)

    def stop(self) -> dict[str, float] | None:
        """Stop sampling; the mean and largest utilisation (%) and the largest used memory (MiB), or None."""
        if self.proc is None:
            return None
        self.proc.terminate()
        self.proc.wait()
        samples = []
        for line in self.path.read_text().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 2 and all(p.replace(".", "", 1).isdigit() for p in parts[:2]):
                samples.append((float(parts[0]), float(parts[1])))
        if not samples:
            return None
        utils = [u for u, _ in samples]
        return {
            "samples": len(samples),
            "util_mean_pct": round(sum(utils) / len(utils), 1),
            "util_max_pct": max(utils),
            "memory_used_max_mib": max(m for _, m in samples),
        }


def gpu_snapshot() -> dict[str, Any] | None:
    """The GPU's name, driver, utilisation and used memory right now (``nvidia-smi``), or None."""
    if not shutil.which("nvidia-smi"):
        return None
    query = "--query-gpu=name,driver_version,utilization.gpu,memory.used,memory.total"
    out = subprocess.run(["nvidia-smi", query, "--format=csv,noheader,nounits"], capture_output=True, text=True)
    fields = [f.strip() for f in out.stdout.splitlines()[0].split(",")] if out.returncode == 0 and out.stdout else []
    if len(fields) < 5:
        return None
    keys = ("name", "driver", "util_pct", "memory_used_mib", "memory_total_mib")
    return dict(zip(keys, fields))


def run_limited(
    cmd: list[str],
    env: dict[str, str],
    log_file: Path,
    limit_s: float,
    cwd: Path,
    watch: Callable[[], None] = lambda: None,
) -> tuple[int | None, float]:
    """Run ``cmd`` in its own process group with output to ``log_file``, calling ``watch()`` every 0.25 s; past
    ``limit_s`` the group gets SIGTERM, then SIGKILL 3 s later; any process left in the group when the child
    ends is killed too. Returns ``(exit status or None when stopped
    at the limit, seconds)``."""
    start = time.perf_counter()
    with log_file.open("w") as handle:
        proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
        try:
            while proc.poll() is None:
                watch()
                if time.perf_counter() - start > limit_s:
                    _stop_group(proc, graceful=True)
                    return None, time.perf_counter() - start
                time.sleep(0.25)
        finally:
            _stop_group(proc, graceful=False)  # whatever the child left in its group (and its device memory)
    watch()
    return proc.returncode, time.perf_counter() - start


def _stop_group(proc: subprocess.Popen[Any], graceful: bool) -> None:
    """SIGKILL the process group of ``proc``; with ``graceful``, SIGTERM first and 3 s to exit."""
    signals = ((signal.SIGTERM, 3.0),) if graceful else ()
    for sig, wait in (*signals, (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue


def log_tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file."""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.is_file() else ""


# ----------------------------------------------------------------------------------------------- the parts
class Bench:
    """One benchmark run: the work directory, the children's environment, the budget and the JSON so far."""

    def __init__(self, args: argparse.Namespace, work: Path, env: dict[str, str]) -> None:
        """Set up the run of ``args`` in ``work`` with the child environment ``env``."""
        self.args = args
        self.spec = SIZES[args.size]
        self.work = work
        self.env = env
        self.home = work / "home"
        self.logs = work / "logs"
        self.logs.mkdir(parents=True)
        self.deadline = time.perf_counter() + args.budget - RESERVE_S
        self.doc: dict[str, Any] = {"size": args.size, "device": args.device, "budget_s": args.budget, "parts": {}}

    def limit(self, part: str, remaining: list[str]) -> float:
        """The time limit of ``part``: its share of the budget left, over the shares of the parts still to run."""
        left = max(self.deadline - time.perf_counter(), 0.0)
        return left * SHARES[part] / sum(SHARES[p] for p in remaining)

    def save(self) -> None:
        """Write the document so far (and the logs) to ``--out-dir``, when given."""
        out = self.args.out_dir
        if out is None:
            return
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu.json").write_text(json.dumps(self.doc, indent=2))
        for log_file in self.logs.iterdir():
            shutil.copyfile(log_file, out / log_file.name)

    def child(
        self,
        part: str,
        cmd: list[str],
        limit: float,
        watch: Callable[[], None] = lambda: None,
        env: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Run one child (with ``env``, default the run's) while sampling the GPU; its ``status`` (``ok``,
        ``failed`` or ``timeout``), ``limit_s``, ``seconds``, ``gpu`` (:meth:`GpuSampler.stop`) and, unless ok,
        ``error`` with the log's tail."""
        log(f"{part}: up to {limit:.0f} s")
        log_file = self.logs / f"{part}.log"
        sampler = GpuSampler(self.logs / f"{part}.gpu.csv")
        try:
            status, seconds = run_limited(cmd, env or self.env, log_file, limit, self.work, watch)
        finally:
            gpu = sampler.stop()
        out: dict[str, Any] = {"limit_s": round(limit, 1), "seconds": round(seconds, 1), "gpu": gpu}
        if status == 0:
            out["status"] = "ok"
        elif status is None:
            out.update(
                status="timeout", error=f"stopped at its limit of {limit:.0f} s; log tail:\n{log_tail(log_file)}"
            )
        else:
            out.update(status="failed", error=f"exit status {status}; log tail:\n{log_tail(log_file)}")
        return out

    def work_cmd(self, part: str, *extra: str) -> list[str]:
        """``python bench/gpu_work.py <part>`` for this run."""
        script = str(BENCH_DIR / "gpu_work.py")
        return [
            sys.executable,
            script,
            part,
            "--work",
            str(self.work),
            "--size",
            self.args.size,
            "--device",
            self.args.device,
            *extra,
        ]

    def child_result(self, part: str) -> dict[str, Any]:
        """What a ``gpu_work.py`` child wrote to ``<work>/<part>.json`` ({} when nothing)."""
        path = self.work / f"{part}.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    # ---------------------------------------------------------------------------------------------- build
    def build(self, limit: float) -> dict[str, Any]:
        """Tokenizer, model and GSM8K parquet files; the software and device found by the child."""
        out = self.child("build", self.work_cmd("build"), limit)
        out.update(self.child_result("build"))
        if out["status"] == "ok":
            start = time.perf_counter()
            try:
                self.seed_args = seed_arguments(self.home, self.env)
            except common.BenchError as exc:
                out.update(status="failed", error=str(exc))
            out["data_s"] = round(time.perf_counter() - start, 1)
        return out

    # ------------------------------------------------------------------------------------------------ gen
    def gen(self, limit: float) -> dict[str, Any]:
        """The HF engine against ``model.generate`` (``bench/gpu_work.py gen``)."""
        extra = [
            "--rows",
            str(self.spec["gen_rows"]),
            "--response-length",
            str(self.spec["response_length"]),
            "--deadline",
            str(time.time() + limit),
        ]
        out = self.child("gen", self.work_cmd("gen", *extra), limit)
        out.update(self.child_result("gen"))
        return out

    # ---------------------------------------------------------------------------------------------- train
    def train(self, limit: float) -> dict[str, Any]:
        """The seed command with the user's overrides; the step breakdown, MFU and memory from its metrics."""
        runs = self.work / "runs-train"
        overrides = train_overrides(self.spec, self.work / "model", self.args.device, runs)
        cmd = [sys.executable, "-m", "rlcore", "run", *self.seed_args, *overrides]
        watcher = RunWatcher(runs)
        out = self.child("train", cmd, limit, watcher.poll)
        out["user_overrides"] = [o.replace(str(self.work), "<work>") for o in overrides]
        out.update(watcher.summary())
        out.update(train_summary(watcher.rows()))
        out["plan"] = self.plan([*self.seed_args, *overrides])
        out["plan_vs_measured"] = plan_vs_measured(out["plan"], out.get("last_step", {}))
        return out

    def plan(self, run_args: list[str]) -> dict[str, Any]:
        """``rlcore plan`` of the train part's command line on this device (``--json``): each phase's
        predicted peak per rank, the step time and the verdict, or ``error`` when it could not be made."""
        log_file = self.logs / "plan.log"
        gpu = "cpu" if self.args.device == "cpu" else None
        cmd = [sys.executable, "-m", "rlcore", "plan", *run_args, "--json", *(["--gpu", gpu] if gpu else [])]
        try:
            result = subprocess.run(
                cmd, env=self.env, cwd=self.work, capture_output=True, text=True, timeout=PLAN_LIMIT_S
            )
        except subprocess.TimeoutExpired:
            return {"error": f"rlcore plan took longer than {PLAN_LIMIT_S} s"}
        log_file.write_text(result.stderr)
        if result.returncode != 0:
            return {"error": f"exit status {result.returncode}: {result.stderr.strip()[-2000:]}"}
        return json.loads(result.stdout)

    # -------------------------------------------------------------------------------------------- bundled
    def bundled(self, limit: float) -> dict[str, Any]:
        """The bundled task's first run, from an empty cache."""
        runs = self.work / "runs-bundled"
        extra = self.spec["bundled"]
        cmd = [
            sys.executable,
            "-m",
            "rlcore",
            "run",
            f"trainer.device={self.args.device}",
            f"trainer.runs_dir={runs}",
            *extra,
        ]
        env = dict(self.env, RLCORE_CACHE=str(self.work / "cache-bundled"))
        watcher = RunWatcher(runs)
        out = self.child("bundled", cmd, limit, watcher.poll, env)
        out["user_overrides"] = [f"trainer.device={self.args.device}", *extra]
        out.update(watcher.summary())
        rows = watcher.rows()
        val_keys = sorted({k for r in rows for k in r if k.startswith("val-core/")})
        out["validation"] = {key: [[r["step"], round(r[key], 4)] for r in rows if key in r] for key in val_keys}
        return out

    # ------------------------------------------------------------------------------------------------ run
    def run(self) -> dict[str, Any]:
        """Build, then the chosen parts in order; a part that cannot run is reported as skipped."""
        remaining = ["build", *self.args.parts]
        self.doc["started"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        try:
            while remaining:
                part = remaining[0]
                built = part == "build" or self.doc["parts"]["build"].get("status") == "ok"
                if not built:
                    self.doc["parts"][part] = {"status": "skipped", "error": "the build part did not succeed"}
                else:
                    self.doc["parts"][part] = getattr(self, part)(self.limit(part, remaining))
                remaining.pop(0)
                self.save()
        except Stopped as exc:
            for index, part in enumerate(remaining):
                status = "stopped" if index == 0 else "skipped"
                self.doc["parts"][part] = {"status": status, "error": f"the benchmark received {exc}"}
            self.save()
        return self.doc


class RunWatcher:
    """Watches an ``rlcore run`` child's run folder: when its first training step was logged."""

    def __init__(self, runs: Path) -> None:
        """Watch ``runs`` (the run's ``trainer.runs_dir``)."""
        self.runs = runs
        self.start = time.perf_counter()
        self.first_step_s: float | None = None

    def metrics_file(self) -> Path | None:
        """The run's ``metrics.jsonl`` once it exists."""
        files = sorted(self.runs.glob("*/*/metrics.jsonl"))
        return files[0] if files else None

    def rows(self) -> list[dict[str, Any]]:
        """The run's metric rows so far (a partly written last line is skipped)."""
        path = self.metrics_file()
        rows = []
        for line in path.read_text().splitlines() if path else []:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return rows

    def poll(self) -> None:
        """Note the time when the first row with ``timing_s/step`` appears."""
        if self.first_step_s is None and any("timing_s/step" in r for r in self.rows()):
            self.first_step_s = round(time.perf_counter() - self.start, 1)

    def summary(self) -> dict[str, Any]:
        """``first_step_s``, ``steps_done``, and the run's ``device_peak`` (from ``derived.json``)."""
        path = self.metrics_file()
        derived = path.parent / "derived.json" if path else None
        peak = json.loads(derived.read_text()).get("device_peak") if derived and derived.is_file() else None
        return {
            "first_step_s": self.first_step_s,
            "steps_done": sum(1 for r in self.rows() if "timing_s/step" in r),
            "device_peak": peak,
        }


# ------------------------------------------------------------------------------------------ the training run
def seed_arguments(home: Path, env: dict[str, str]) -> list[str]:
    """The seed command's arguments after its entry point, ``$HOME`` replaced by ``home`` (the children's
    ``HOME`` in ``env``), where ``rlcore data gsm8k`` writes the bundled GSM8K rows as parquet
    (``rlcore_testkit.seed.seed_arguments``)."""
    from rlcore_testkit.seed import seed_arguments as parse

    try:
        return parse(SEED_FILE, GSM8K_DIR, home, env)
    except AssertionError as exc:
        raise common.BenchError(f"{SEED_FILE}: cannot prepare the seed command's data: {exc}") from exc


def train_overrides(spec: dict[str, Any], model_dir: Path, device: str, runs: Path) -> list[str]:
    """What the user appends to the seed command through its ``$@``: the local model, the HF engine (no vLLM
    on the GPU machine), the scaled-down batch, EOS ignored (random weights never stop), the device, one
    validation before training (``test_freq=-1``: not again after the last step), where runs go and the
    size's own keys (``tiny``: prompts cut to 256 tokens, so that CI's run stays short)."""
    return [
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.rollout.name=hf",
        f"data.train_batch_size={spec['train_prompts']}",
        f"data.max_response_length={spec['response_length']}",
        f"trainer.total_training_steps={spec['train_steps']}",
        f"data.val_max_samples={spec['val_prompts']}",
        "actor_rollout_ref.rollout.ignore_eos=true",
        f"trainer.device={device}",
        "trainer.test_freq=-1",
        f"trainer.runs_dir={runs}",
        *spec["train_extra"],
    ]


#: seconds ``rlcore plan`` may take (it reads the model's config and builds it on the meta device)
PLAN_LIMIT_S = 300
#: the worker methods whose peak memory the run measures -> the plan's phases
PLAN_PHASES = {
    "generate_sequences": "rollout",
    "compute_log_prob": "old_log_prob",
    "compute_ref_log_prob": "ref_log_prob",
    "update_critic": "critic_update",
    "update_actor": "actor_update",
}


def plan_vs_measured(plan: dict[str, Any], last_step: dict[str, Any]) -> dict[str, Any]:
    """Per phase: the plan's peak (GiB, without its CUDA runtime allowance, which the allocator does not
    count) beside the last step's measured ``max_memory_allocated_gb`` of the matching worker method, and
    their ratio; empty when either is missing (a CPU run measures no device memory)."""
    measured = last_step.get("max_memory_allocated_gb") or {}
    phases = {phase["name"]: phase for phase in plan.get("phases", [])}
    out: dict[str, Any] = {}
    for method, name in PLAN_PHASES.items():
        if method not in measured or name not in phases:
            continue
        terms = phases[name]["terms"]
        predicted = (phases[name]["peak_bytes"] - terms.get("cuda_runtime", 0)) / 2**30
        out[name] = {
            "predicted_gb": round(predicted, 3),
            "measured_gb": measured[method],
            "ratio": round(predicted / measured[method], 3) if measured[method] else None,
        }
    return out


#: the per-step metrics reported under ``steps`` (prefix -> JSON key)
STEP_GROUPS = {
    "timing_s/": "timing_s",
    "timing_worker_s/": "timing_worker_s",
    "perf/mfu/": "mfu",
    "perf/max_memory_allocated_gb/": "max_memory_allocated_gb",
    "perf/max_memory_reserved_gb/": "max_memory_reserved_gb",
}


def train_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Validation time and reward (step 0), each training step's breakdown, and the last step's headline."""
    out: dict[str, Any] = {}
    val = next((r for r in rows if "timing_s/testing" in r), None)
    if val is not None:
        out["validation"] = {
            k: round(v, 4) for k, v in val.items() if k == "timing_s/testing" or k.startswith("val-core/")
        }
    steps = []
    for row in (r for r in rows if "timing_s/step" in r):
        step: dict[str, Any] = {"step": row["step"]}
        for prefix, key in STEP_GROUPS.items():
            step[key] = {
                k.removeprefix(prefix): round(v, 4)
                for k, v in row.items()
                if k.startswith(prefix) and "/" not in k.removeprefix(prefix)
            }
        step["throughput"] = round(row.get("perf/throughput", 0.0), 1)
        step["response_length_mean"] = round(row.get("response_length/mean", 0.0), 1)
        steps.append(step)
    out["steps"] = steps
    if steps:
        last = steps[-1]
        out["last_step"] = {
            "step_s": last["timing_s"]["step"],
            "mfu": last["mfu"],
            "max_memory_allocated_gb": last["max_memory_allocated_gb"],
        }
    return out


# --------------------------------------------------------------------------------------------------- set-up
def git_commit() -> str | None:
    """The checkout's commit (``+dirty`` with uncommitted changes), else the one ``bench/gpu_wheels.sh`` wrote."""
    out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if out.returncode == 0:
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        )
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    recorded = REPO / ".gpu" / "commit.txt"
    return recorded.read_text().strip() if recorded.is_file() else None


def install_wheels(wheels: Path, target: Path) -> float:
    """``pip install --no-index --no-deps --target target`` of every wheel under ``wheels``; returns seconds."""
    files = sorted(str(p) for p in wheels.rglob("*.whl"))
    if not files:
        raise common.BenchError(f"--wheels {wheels}: no .whl files there (build them with bench/gpu_wheels.sh)")
    start = time.perf_counter()
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--target",
        str(target),
        *files,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise common.BenchError(f"installing the wheels of {wheels} failed:\n{out.stderr[-2000:]}")
    return time.perf_counter() - start


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options, checked (an unknown size or part is a one-line error)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--size", default="1.7b", help=f"one of {', '.join(SIZES)} (default 1.7b)")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)} (build always runs)"
    )
    parser.add_argument(
        "--budget", type=float, default=None, help="seconds for everything (default: 480 for 1.7b, 240 for tiny)"
    )
    parser.add_argument(
        "--wheels", type=Path, default=None, help="install these wheels for the children (no package index)"
    )
    parser.add_argument(
        "--out-dir", type=Path, default=None, help="write gpu.json after every part, and the parts' logs"
    )
    parser.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS for the children (0 = leave as is)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (model, logs, run folders)")
    args = parser.parse_args(argv)
    if args.size not in SIZES:
        raise common.BenchError(f"unknown --size {args.size!r}: use {' or '.join(SIZES)}")
    args.parts = [p for p in args.parts.split(",") if p]
    unknown = [p for p in args.parts if p not in PARTS]
    if unknown or not args.parts:
        raise common.BenchError(f"unknown --parts {','.join(unknown) or '(none)'}: choose from {', '.join(PARTS)}")
    args.parts = [p for p in PARTS if p in args.parts]
    args.budget = args.budget or SIZES[args.size]["budget"]
    if args.budget <= RESERVE_S:
        raise common.BenchError(f"--budget must be more than {RESERVE_S:.0f} s")
    common.check_non_negative(args, "threads")
    return args


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark (the body of :func:`common.run_main`)."""

    def stop(signum: int, frame: Any) -> None:
        """Turn SIGTERM and SIGINT into :class:`Stopped` so that the JSON of the parts done is still printed."""
        raise Stopped(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    load_start, started = os.getloadavg()[0], time.perf_counter()
    with common.work_dir("rlcore-gpu-", args.keep, log) as work:
        home = work / "home"  # the children's HOME: the seed's $HOME/data/gsm8k, caches; nothing of the user's
        home.mkdir()
        env = common.bench_env(args.threads, PYTHONUNBUFFERED="1", HOME=str(home))
        extra: dict[str, Any] = {}
        if args.wheels is not None:
            site = work / "site"
            extra["wheels_install_s"] = round(install_wheels(args.wheels, site), 1)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
            sys.path.insert(0, str(site))
        bench = Bench(args, work, env)
        bench.doc.update(git_commit=git_commit(), host=platform.node(), gpu_at_start=gpu_snapshot(), **extra)
        doc = bench.run()
        doc.update(
            machine=common.machine_info(args.threads, load_start), wall_s=round(time.perf_counter() - started, 1)
        )
        bench.save()
        return doc


def main(argv: list[str] | None = None) -> int:
    """Print the benchmark's JSON document (exit 0), or a one-line error for bad options (exit 2)."""
    try:
        args = parse_args(argv)
    except common.BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return common.run_main("gpu", args.threads, lambda: run_bench(args))


if __name__ == "__main__":
    raise SystemExit(main())
