"""Bytes a weight sync sends per step, full (``naive``) vs ``delta``
(``actor_rollout_ref.rollout.checkpoint_engine.backend``), over real PPO optimizer steps.

One CPU process holds a split placement: an FSDP ``actor`` worker and an HF ``rollout`` worker on a Qwen2-shaped
model built from config (``--hidden``, ``--layers``; no download). After each of ``--steps`` updates of the
actor (random responses, advantages 1, learning rate ``--lr``) the ``delta`` transport syncs the rollout worker
and the bench records what it sent. For comparison it also counts, between consecutive trainer states, the
share of *elements* whose bytes changed, in float32 and after a cast to bfloat16 (the grain of verl's sparse
delta, which rlcore's whole-tensor engines do not take).

    python bench/weight_transport.py --steps 3
    python bench/weight_transport.py --steps 3 --lr 1e-7

Prints one JSON object on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

BENCH_DIR = str(Path(__file__).resolve().parent)
if BENCH_DIR not in sys.path:  # ``python bench/weight_transport.py`` has it first already; other loaders may not
    sys.path.insert(0, BENCH_DIR)
from common import sized_model_dir  # noqa: E402  (the model sized by --hidden and --layers)


def log(message: str) -> None:
    """A progress line on stderr."""
    print(f"[weight_transport] {message}", file=sys.stderr, flush=True)


def changed_elements(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor], dtype: torch.dtype) -> float:
    """The share of elements whose bytes differ between two states, both cast to ``dtype``."""
    bits = torch.int16 if dtype.itemsize == 2 else torch.int32
    changed = total = 0
    for name, tensor in after.items():
        changed += int((before[name].to(dtype).view(bits) != tensor.to(dtype).view(bits)).sum())
        total += tensor.numel()
    return changed / total if total else 0.0


def main() -> None:
    """Run the steps and print the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-6)
    args = parser.parse_args()
    if args.steps < 1:
        print(f"error: --steps={args.steps}: give at least 1", file=sys.stderr)
        sys.exit(2)
    report = os.fdopen(os.dup(1), "w")  # the JSON goes here; what libraries print goes to stderr
    os.dup2(2, 1)
    from rlcore_testkit.contracts.backend import TrainingBackendContract, make_batch
    from transformers import AutoTokenizer

    from rlcore.controller.groups import GroupReceiver, sync_weights
    from rlcore.rollout.transport import DeltaTransport

    class Settings(TrainingBackendContract):
        component_name = "fsdp"

    torch.set_num_threads(1)
    steps: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = sized_model_dir(Path(tmp) / "model", args.hidden, args.layers)
        overrides = {
            "actor_rollout_ref.rollout.response_length": 8,
            "actor_rollout_ref.actor.optim.lr": args.lr,
            "actor_rollout_ref.rollout.checkpoint_engine.backend": "delta",
        }
        trainer = Settings.make_actor(model_dir, role="actor", **overrides)
        rollout = Settings.make_actor(model_dir, role="rollout", **overrides)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        transport = DeltaTransport(trainer.transport_config)
        receiver = GroupReceiver(rollout, keep=True)
        first = sync_weights(trainer, rollout, transport, None, receiver)
        log(f"first sync: {first['actor/weight_sync_bytes']:.0f} bytes (full)")
        before = {name: tensor.clone() for name, tensor in trainer.full_state_dict().items()}
        for step in range(1, args.steps + 1):
            batch = make_batch(tokenizer)
            batch.union(trainer.compute_log_prob(batch).select(["old_log_probs"]))
            batch["advantages"] = torch.ones_like(batch["old_log_probs"])
            trainer.update_actor(batch)
            metrics = sync_weights(trainer, rollout, transport, None, receiver)
            after = {name: tensor.clone() for name, tensor in trainer.full_state_dict().items()}
            row = {
                "step": step,
                "bytes_sent": metrics["actor/weight_sync_bytes"],
                "bytes_full": metrics["actor/weight_sync_bytes_full"],
                "delta_fraction": metrics["actor/weight_sync_delta_fraction"],
                "changed_elements_fp32": changed_elements(before, after, torch.float32),
                "changed_elements_bf16": changed_elements(before, after, torch.bfloat16),
                "checksum_diff": metrics.get("rollout/weight_checksum_diff"),
            }
            log(json.dumps(row))
            steps.append(row)
            before = after
        Settings.close(rollout)
        Settings.close(trainer)
    report.write(
        json.dumps({"hidden": args.hidden, "layers": args.layers, "lr": args.lr, "steps": steps}, indent=1) + "\n"
    )
    report.close()


if __name__ == "__main__":
    main()
