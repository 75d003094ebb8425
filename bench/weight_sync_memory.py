"""What a weight sync costs: the peak extra memory of one sync, with and without buckets
(``actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes``; ``--measure memory``, the
default), or the bytes it sends per step of a real run, full (``naive``) vs ``delta`` (``--measure bytes``).

``--measure memory``:

Builds a Qwen2-shaped model from config (``--hidden``, ``--layers``; no download), then for every bucket size of
``--buckets`` (``none`` = the whole state dict at once) starts fresh worker processes: an FSDP ``actor_rollout``
worker with the HF rollout engine on each of ``--ranks`` ranks (gloo on CPU, NCCL on CUDA), and times one
``sync_weights()`` after ``init_model`` (whose first sync warms every allocation up). Rank 0 measures what
the sync added on top of what was resident before it:

- CPU: the peak resident set size (``VmHWM``, reset through ``/proc/self/clear_refs``) minus ``VmRSS`` before
  (with ``MALLOC_MMAP_THRESHOLD_`` fixed, so that freed tensors leave the resident set);
- CUDA: ``torch.cuda.max_memory_allocated`` (reset first) minus ``memory_allocated`` before.

On one CPU rank the rollout engine shares the actor's tensors and a sync copies nothing, so the CPU default is
two ranks (each rank then gathers full tensors and copies them into its engine). On CUDA one rank copies.

    python bench/weight_sync_memory.py                                   # CPU, 2 ranks, 470 MB of weights
    python bench/weight_sync_memory.py --device cuda --ranks 1 --hidden 2048 --layers 16

``--measure bytes``: one CPU process holds a colocated ``actor_rollout`` worker (FSDP actor, HF rollout engine)
for every rollout dtype of ``--rollout-dtypes`` (``fp32``: the trainer's; ``bf16``: ``fsdp_config.cpu_autocast``
with a bf16 compute dtype, so the engine holds bf16 copies) and every learning rate of ``--lrs``. Each of
``--steps`` steps is a real PPO update (random responses, advantages 1), then one sync through the transport
(``_send_weights``, past the one-rank path that shares the actor's tensors), once with ``naive`` and once, in a
second run from the same seed (the same weights every step), with ``delta``. Per step it reports the bytes a full
sync sends (the trainer's float32 tensors; the same in the engine's dtype), what ``delta`` sent and its fraction,
the share of elements that changed in the engine's dtype, the process CPU seconds of each sync (the check after
it included) and the wall seconds of ``delta``'s encoding (the cast, comparison and hash on the sender:
``actor/weight_sync_encode_s``; on a loaded machine wall time runs ahead of the CPU time).

With ``--training-runs`` it also runs, per learning rate, two real ``rlcore run`` trainings of the test kit's tiny
digit task (generation, reward, GAE, PPO) with a bf16 rollout, ``naive`` and ``delta``, and reports their weight
sync metrics step by step and whether every other metric is equal (the same weights served every step).

    python bench/weight_sync_memory.py --measure bytes --hidden 512 --layers 4 --steps 3 --training-runs

Prints one JSON object on stdout; progress on stderr; bad input gives ``error: ...`` and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:  # ``python bench/weight_sync_memory.py`` has it first already; other loaders may not
    sys.path.insert(0, BENCH_DIR)
from common import sized_model_dir  # noqa: E402  (the model sized by --hidden and --layers)


def log(message: str) -> None:
    """A progress line on stderr."""
    print(f"[weight_sync_memory] {message}", file=sys.stderr, flush=True)


def _status_kib(field: str) -> int:
    """A ``VmRSS``/``VmHWM`` line of ``/proc/self/status`` in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def measure_sync(worker: Any, device: str) -> dict[str, float]:
    """One ``sync_weights()`` of ``worker``: its metrics plus the extra bytes it needed at its peak."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS to the current RSS
        before = _status_kib("VmRSS") * 1024
    start = time.perf_counter()
    metrics = dict(worker.sync_weights())
    seconds = time.perf_counter() - start
    if device == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = _status_kib("VmHWM") * 1024
    return {**metrics, "sync_s": seconds, "peak_extra_bytes": float(peak - before)}


def run_rank(rank: int, world: int, store: str, model_dir: str, megabytes: float | None, device: str, out: str) -> None:
    """A spawned rank: an FSDP actor + HF rollout worker, one measured sync; rank 0 writes the result."""
    os.dup2(2, 1)  # what libraries print goes to stderr: stdout holds the JSON only
    from rlcore.config import load_config
    from rlcore.workers.actor import ActorRolloutRefWorker

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", LOCAL_RANK=str(rank))
    if device == "cuda":
        torch.cuda.set_device(rank)
    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.FileStore(store, world), rank=rank, world_size=world)
    bucket = "null" if megabytes is None else str(megabytes)
    config = load_config(
        overrides=[
            f"actor_rollout_ref.model.path={model_dir}",
            f"trainer.device={device}",
            f"trainer.n_gpus_per_node={world}",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            "data.train_batch_size=2",
            "data.max_prompt_length=16",
            "data.max_response_length=8",
            "actor_rollout_ref.rollout.free_cache_engine=false",
            f"actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes={bucket}",
        ]
    )
    worker = ActorRolloutRefWorker(config, "actor_rollout", rank, world)
    try:
        worker.init_model()
        result = measure_sync(worker, device)
        result["weights_bytes"] = float(sum(t.numel() * t.element_size() for t in worker.actor.full_weights().values()))
    finally:
        worker.shutdown()
        if dist.is_initialized():
            dist.destroy_process_group()
    if rank == 0:
        Path(out).write_text(json.dumps(result))


def changed_share(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> float:
    """The share of elements whose bytes differ between two snapshots of the same weights (same dtypes)."""
    changed = total = 0
    for name, tensor in after.items():
        bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
        changed += int((before[name].view(bits) != tensor.view(bits)).sum())
        total += tensor.numel()
    return changed / total if total else 0.0


def bytes_run(model_dir: Path, rollout_dtype: str, lr: float, steps: int, backend: str) -> list[dict[str, Any]]:
    """``steps`` real PPO updates of a colocated worker, each followed by one sync through ``backend``: per step
    the bytes of the trainer's tensors (what ``naive`` sends), the sync's metrics, its process CPU seconds and
    (``delta``) the share of changed elements."""
    from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch

    class Settings(TrainingBackendContract):
        component_name = "fsdp"

    overrides = {
        "actor_rollout_ref.rollout.response_length": 8,
        "actor_rollout_ref.actor.optim.lr": lr,
        "actor_rollout_ref.actor.fsdp_config.cpu_autocast": rollout_dtype == "bf16",
        "actor_rollout_ref.rollout.checkpoint_engine.backend": backend,
    }
    torch.manual_seed(0)
    worker = Settings.make_actor(model_dir, role="actor_rollout", **overrides)
    rows: list[dict[str, Any]] = []
    try:
        worker._send_weights(worker.actor, worker.rollout_engine)  # the first send (full), past the shared path
        for step in range(1, steps + 1):
            batch = make_batch(worker.tokenizer)
            batch.union(worker.compute_log_prob(batch).select(["old_log_probs"]))
            batch["advantages"] = torch.ones_like(batch["old_log_probs"])
            worker.update_actor(batch)
            before = getattr(worker.transport, "snapshot", None)
            cpu = time.process_time()
            metrics = worker._send_weights(worker.actor, worker.rollout_engine)
            row: dict[str, Any] = {"step": step, "sync_cpu_s": round(time.process_time() - cpu, 4)}
            row["trainer_bytes"] = sum(t.numel() * t.element_size() for t in worker.full_state_dict().values())
            row["checksum_diff"] = metrics.get("rollout/weight_checksum_diff")
            if backend == "delta":
                row["changed_elements"] = round(changed_share(before or {}, worker.transport.snapshot), 5)
                row.update(
                    {
                        key.removeprefix("actor/weight_sync_"): value
                        for key, value in metrics.items()
                        if "weight_sync_" in key
                    }
                )
            rows.append(row)
    finally:
        Settings.close(worker)
    return rows


def training_run(model_dir: Path, work: Path, lr: float, steps: int, backend: str) -> list[dict[str, Any]]:
    """A real ``rlcore run`` (the test kit's tiny digit task: generation, reward, GAE, PPO) of ``steps`` steps with a
    bfloat16 rollout (``cpu_autocast``) through ``backend``: every training step's metrics."""
    from rlcore_testkit.runs import make_tiny_task, tiny_run

    extra = [
        "actor_rollout_ref.actor.fsdp_config.cpu_autocast=true",
        f"actor_rollout_ref.actor.optim.lr={lr}",
        f"trainer.total_training_steps={steps}",
        "trainer.test_freq=-1",
        f"actor_rollout_ref.rollout.checkpoint_engine.backend={backend}",
    ]
    _, run_dir = tiny_run(work / backend, model_dir, make_tiny_task(work / "task"), *extra)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if row.get("step", 0) >= 1]


#: metric names that depend on timing or on the transport, left out when two runs are compared
RUN_DEPENDENT = ("timing", "perf/", "_s", "memory", "weight_sync_", "throughput", "mfu")


def measure_training_runs(model_dir: Path, work: Path, lrs: list[float], steps: int) -> list[dict[str, Any]]:
    """Per learning rate: a ``naive`` and a ``delta`` training run with a bf16 rollout, step by step side by side,
    and whether their metrics (timing and transport metrics left out) are equal."""
    runs = []
    for lr in lrs:
        log(f"training runs, bf16 rollout, lr {lr}: naive, then delta")
        naive = training_run(model_dir, work / f"lr{lr}", lr, steps, "naive")
        delta = training_run(model_dir, work / f"lr{lr}", lr, steps, "delta")
        same = all(
            {key: value for key, value in a.items() if not any(part in key for part in RUN_DEPENDENT)}
            == {key: value for key, value in b.items() if not any(part in key for part in RUN_DEPENDENT)}
            for a, b in zip(naive, delta, strict=True)
        )
        steps_out = [
            {
                "step": b["step"],
                "bytes_full": b["actor/weight_sync_bytes_full"],
                "bytes_delta": b["actor/weight_sync_bytes"],
                "delta_fraction": round(b["actor/weight_sync_delta_fraction"], 5),
                "sync_s_naive": round(a["actor/weight_sync_s"], 4),
                "sync_s_delta": round(b["actor/weight_sync_s"], 4),
                "encode_s_delta": round(b["actor/weight_sync_encode_s"], 4),
                "checksum_diff": [a.get("rollout/weight_checksum_diff"), b.get("rollout/weight_checksum_diff")],
            }
            for a, b in zip(naive, delta, strict=True)
        ]
        for row in steps_out:
            log(json.dumps(row))
        runs.append({"rollout_dtype": "bf16", "lr": lr, "same_metrics_as_naive": same, "steps": steps_out})
    return runs


def measure_bytes(args: argparse.Namespace) -> dict[str, Any]:
    """Every rollout dtype x learning rate: a ``naive`` and a ``delta`` run of ``args.steps`` steps, side by side."""
    torch.set_num_threads(1)
    dtypes = [item.strip() for item in args.rollout_dtypes.split(",")]
    if not set(dtypes) <= {"fp32", "bf16"} or args.steps < 1:
        print(
            f"error: --rollout-dtypes={args.rollout_dtypes!r} (fp32, bf16) / --steps={args.steps} (>= 1)",
            file=sys.stderr,
        )
        sys.exit(2)
    try:
        lrs = [float(item) for item in args.lrs.split(",")]
    except ValueError:
        print(f"error: --lrs={args.lrs!r}: give learning rates, comma-separated", file=sys.stderr)
        sys.exit(2)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = sized_model_dir(Path(tmp) / "model", args.hidden, args.layers)
        for dtype in dtypes:
            for lr in lrs:
                log(f"rollout {dtype}, lr {lr}: naive, then delta")
                naive = bytes_run(model_dir, dtype, lr, args.steps, "naive")
                delta = bytes_run(model_dir, dtype, lr, args.steps, "delta")
                steps = []
                for full, sent in zip(naive, delta, strict=True):
                    steps.append(
                        {
                            "step": sent["step"],
                            "bytes_naive": full["trainer_bytes"],
                            "bytes_full": sent["bytes_full"],
                            "bytes_delta": sent["bytes"],
                            "delta_fraction": round(sent["delta_fraction"], 5),
                            "changed_elements": sent["changed_elements"],
                            "sync_cpu_s_naive": full["sync_cpu_s"],
                            "sync_cpu_s_delta": sent["sync_cpu_s"],
                            "encode_wall_s_delta": round(sent["encode_s"], 4),
                            "checksum_diff": [full["checksum_diff"], sent["checksum_diff"]],
                        }
                    )
                    log(json.dumps(steps[-1]))
                runs.append({"rollout_dtype": dtype, "lr": lr, "steps": steps})
        training = measure_training_runs(model_dir, Path(tmp) / "runs", lrs, args.steps) if args.training_runs else []
    weights_mib = runs[0]["steps"][0]["bytes_naive"] / 2**20
    return {
        "measure": "bytes",
        "device": "cpu",
        "model": {"hidden": args.hidden, "layers": args.layers, "weights_mib_fp32": round(weights_mib, 1)},
        "runs": runs,
        "training_runs": training,
    }


def main() -> None:
    """Parse the options; ``memory``: run every bucket size in fresh processes; ``bytes``: the real runs. Print
    the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measure", choices=("memory", "bytes"), default="memory")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--ranks", type=int, default=None, help="default: 2 on CPU, 1 on CUDA")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--buckets", default="none,4,32,128", help="MiB per bucket, comma-separated; none = no bound")
    parser.add_argument("--steps", type=int, default=3, help="bytes: PPO steps per run")
    parser.add_argument("--lrs", default="1e-6,1e-5", help="bytes: learning rates, comma-separated")
    parser.add_argument("--rollout-dtypes", default="fp32,bf16", help="bytes: the rollout engine's dtypes (fp32, bf16)")
    parser.add_argument(
        "--training-runs", action="store_true", help="bytes: also real rlcore runs (bf16 rollout), naive and delta"
    )
    args = parser.parse_args()
    report = os.fdopen(os.dup(1), "w")  # the JSON goes here; what libraries print goes to stderr
    os.dup2(2, 1)
    if args.measure == "bytes":
        if args.device != "cpu":
            print("error: --measure bytes runs on CPU (one process, --device cpu)", file=sys.stderr)
            sys.exit(2)
        print(json.dumps(measure_bytes(args), indent=2), file=report, flush=True)
        return
    ranks = args.ranks or (2 if args.device == "cpu" else 1)
    # glibc keeps freed blocks below a threshold it raises on the fly, so a second sync would reuse the pages
    # of the first and the RSS would not show it: a fixed threshold gives every large tensor its own mapping,
    # returned on free (the spawned ranks read this at start-up)
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(128 * 1024)
    try:
        sizes = [None if item.strip() == "none" else float(item) for item in args.buckets.split(",")]
    except ValueError:
        print(f"error: --buckets={args.buckets!r}: give MiB numbers or none, comma-separated", file=sys.stderr)
        sys.exit(2)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but torch sees no CUDA device", file=sys.stderr)
        sys.exit(2)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = sized_model_dir(Path(tmp) / "model", args.hidden, args.layers)
        for index, megabytes in enumerate(sizes):
            log(f"bucket {megabytes} MiB on {ranks} {args.device} rank(s)")
            out = Path(tmp) / f"result{index}.json"
            store = str(Path(tmp) / f"store{index}")
            mp.spawn(run_rank, args=(ranks, store, str(model_dir), megabytes, args.device, str(out)), nprocs=ranks)
            measured = json.loads(out.read_text())
            results.append(
                {
                    "bucket_megabytes": megabytes,
                    "buckets": measured.get("actor/weight_sync_buckets", 1.0),
                    "peak_extra_mib": round(measured["peak_extra_bytes"] / 2**20, 1),
                    "sync_s": round(measured["sync_s"], 3),
                    "weight_checksum_diff": measured.get("rollout/weight_checksum_diff"),
                    "weights_mib": round(measured["weights_bytes"] / 2**20, 1),
                }
            )
    largest = 4 * args.hidden * args.hidden * 4 / 2**20
    summary = {
        "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(),
        "ranks": ranks,
        "model": {"hidden": args.hidden, "layers": args.layers, "largest_tensor_mib": round(largest, 1)},
        "syncs": results,
    }
    print(json.dumps(summary, indent=2), file=report, flush=True)


if __name__ == "__main__":
    main()
