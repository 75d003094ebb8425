"""Peak extra memory of one weight sync, with and without buckets
(``actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes``).

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


def main() -> None:
    """Parse the options, run every bucket size in fresh processes, print the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--ranks", type=int, default=None, help="default: 2 on CPU, 1 on CUDA")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--buckets", default="none,4,32,128", help="MiB per bucket, comma-separated; none = no bound")
    args = parser.parse_args()
    report = os.fdopen(os.dup(1), "w")  # the JSON goes here; what libraries print goes to stderr
    os.dup2(2, 1)
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
