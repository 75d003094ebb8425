"""HF-engine rollout of the tiny mixture-of-experts models: throughput with and without recording the routing
(R3, ``rollout.enable_rollout_routing_replay``), and how often the recording agrees with a teacher-forced forward.

For each family of :data:`rlcore_testkit.tiny.MOE_FAMILIES` (2 sparse layers, 8 experts, top-2) and each batch
size, the engine samples ``--new-tokens`` tokens per prompt with EOS ignored, in float32: generated tokens
per second (median of ``--repeats`` calls after a warm-up, :func:`bench.rollout.time_generation`) with the
recording off and on. ``agreement`` is the share of recorded (token, layer) pairs whose top-k a full forward of
the final sequences chooses too, in float32 and in bfloat16 (float32 must be 1.0; the test asserts it).

    python bench/rollout_moe.py [--batches 8,64] [--new-tokens 64] [--repeats 3] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rollout import log, prompt_batch, rollout_config, time_generation  # noqa: E402


def agreement(engine: Any, batch: Any) -> float:
    """The share of recorded (token, layer) pairs whose experts a teacher-forced forward chooses too."""
    import torch
    from rlcore_plugin_hf.routing import RoutingRecorder

    from rlcore.api.training import ROUTED_EXPERTS

    out = engine.generate(batch)
    recorded = out[ROUTED_EXPERTS]
    inputs = {key: out[key].to(engine.device) for key in ("input_ids", "attention_mask", "position_ids")}
    with RoutingRecorder(engine.module) as recorder, torch.no_grad():
        engine.module(**inputs)
    truth = recorder.collect(len(out["input_ids"])).cpu()
    where = (recorded >= 0).all(dim=-1)
    return round(float((recorded[where] == truth[where]).all(dim=-1).float().mean()), 4)


def bench_family(
    root: Path, family: str, batches: list[int], new_tokens: int, repeats: int, device: str
) -> dict[str, Any]:
    """Throughput with R3 off and on, and the agreement in float32 and bfloat16, for one family on ``device``."""
    import torch
    from rlcore_plugin_hf.engine import HFRolloutEngine
    from rlcore_testkit.tiny import make_tiny_moe_model_dir
    from transformers import AutoTokenizer

    model_dir = make_tiny_moe_model_dir(root / family, family=family)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    result: dict[str, Any] = {}
    for count in batches:
        batch = prompt_batch(tokenizer, count)
        entry: dict[str, Any] = {}
        for record in (False, True):
            log(f"{family}: batch {count}, R3 {'on' if record else 'off'}")
            config = dataclasses.replace(rollout_config(new_tokens), enable_rollout_routing_replay=record)
            engine = HFRolloutEngine(str(model_dir), tokenizer, config, device=device)
            entry["r3_on" if record else "r3_off"] = time_generation(engine, batch, repeats)
        for dtype in (torch.float32, torch.bfloat16):
            config = dataclasses.replace(rollout_config(new_tokens), enable_rollout_routing_replay=True)
            engine = HFRolloutEngine(str(model_dir), tokenizer, config, device=device, dtype=dtype)
            entry[f"agreement_{str(dtype).removeprefix('torch.')}"] = agreement(engine, batch)
        result[f"batch_{count}"] = entry
    return result


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="8,64", help="comma-separated batch sizes (prompts per call)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="where the engine runs: cpu or cuda")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from rlcore_testkit.tiny import MOE_FAMILIES

    batches = [int(value) for value in args.batches.split(",")]
    report: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        },
        "new_tokens": args.new_tokens,
        "families": {},
    }
    # the libraries' prints go to stderr (saving a model imports DeepSpeed, whose logger writes to stdout)
    with tempfile.TemporaryDirectory() as root, contextlib.redirect_stdout(sys.stderr):
        for family in MOE_FAMILIES:
            report["families"][family] = bench_family(
                Path(root), family, batches, args.new_tokens, args.repeats, args.device
            )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
