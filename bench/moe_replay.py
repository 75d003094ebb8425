"""Routing replay on a mixture-of-experts model: the mismatch between the rollout's and the trainer's
log-probs with replay off and with R3, the same run otherwise.

    python bench/moe_replay.py [--size tiny|300m] [--device cpu|cuda] [--cpu-bf16] [--strategy fsdp|megatron] [--steps 2] [--threads 1] [--keep]

The work is ``vs_trl``'s (``bench/common.py``: word problems, the digits reward, GRPO) with the policy replaced
by a randomly initialised Qwen3-MoE (:data:`REPLAY_MODELS`; ``tiny`` is ``make_tiny_moe_model_dir``'s default
shape, ``300m`` a model of Qwen3-30B-A3B's layout (64 experts, top-8) scaled to about 0.3 B parameters, for
a GPU). Each mode runs
``rlcore run`` for ``--steps`` steps with the rollout's log-probs on (``rollout.calculate_log_probs``) and EOS
ignored, so every response has the full length:

- ``off``: the trainer recomputes every router's top-k;
- ``R3``: the HF rollout records each token's experts (``rollout.enable_rollout_routing_replay``) and the
  trainer's passes route them there (``actor.router_replay.mode=R3``).

Per mode the JSON has the medians over the steps of verl's mismatch metrics
(``training/rollout_probs_diff_{max,mean}``: |p_rollout − p_train| over valid tokens), the actor's
``router_replay_agreement`` (the share of (token, layer) pairs whose recomputed top-k is the replayed one),
``moe_aux_loss``, ``moe_load_max_over_mean`` and the step time. On a GPU the rollout decodes in bfloat16 with a
KV cache while training runs a full forward under mixed precision: the two disagree on some near-tied routers,
which is what replay removes. On the CPU both compute in float32 by default and agree exactly; ``--cpu-bf16``
runs them in bfloat16 (``fsdp_config.cpu_autocast``: the rollout serves bfloat16 weights, training autocasts),
the CPU's twin of the GPU's precision. ``--strategy megatron`` trains on the Megatron engine (megatron-core's MoE
layers; replay through its router taps) instead of FSDP.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

#: the MoE models of the work (:func:`rlcore_testkit.tiny.build_moe_model` keywords)
REPLAY_MODELS: dict[str, dict[str, Any]] = {
    "tiny": {},
    "300m": {
        "hidden_size": 768,
        "moe_intermediate_size": 256,
        "num_layers": 8,
        "num_heads": 12,
        "num_kv_heads": 4,
        "num_experts": 64,
        "top_k": 8,
        "tie_word_embeddings": False,
    },
}
#: per size: prompts per step, responses per prompt, new tokens
WORK = {"tiny": (4, 4, 32), "300m": (16, 4, 256)}
MODES = {
    "off": [],
    "R3": [
        "actor_rollout_ref.actor.router_replay.mode=R3",
        "actor_rollout_ref.rollout.enable_rollout_routing_replay=true",
    ],
}
#: the per-step metrics reported for each mode (key in metrics.jsonl -> JSON key)
REPORTED = {
    "training/rollout_probs_diff_max": "probs_diff_max",
    "training/rollout_probs_diff_mean": "probs_diff_mean",
    "actor/router_replay_agreement": "router_replay_agreement",
    "actor/moe_aux_loss": "moe_aux_loss",
    "actor/moe_load_max_over_mean": "moe_load_max_over_mean",
    "timing_s/step": "step_s",
}
log = common.make_log("moe_replay")


def prepare(work: Path, size: str) -> dict[str, Any]:
    """The work of ``common.prepare_work`` with a Qwen3-MoE of ``size`` as the policy; its parameter count."""
    from rlcore_testkit.tiny import build_moe_model
    from transformers import AutoTokenizer

    common.prepare_work(work, "tiny")
    tokenizer = AutoTokenizer.from_pretrained(work / "model")
    model = build_moe_model(tokenizer, **REPLAY_MODELS[size])
    model.save_pretrained(work / "model")
    return {"params": sum(p.numel() for p in model.parameters()), "shape": REPLAY_MODELS[size] or "tiny default"}


def overrides(work: Path, size: str, device: str, steps: int, runs: Path, cpu_bf16: bool, strategy: str) -> list[str]:
    """``rlcore run`` overrides of one mode's run (the mode's own keys are appended by the caller)."""
    prompts, generations, new_tokens = WORK[size]
    base = {o.split("=", 1)[0]: o for o in common.rlcore_overrides(work, "tiny", steps, prompt_len=64, run_root=runs)}
    base.update(
        {
            "data.train_batch_size": f"data.train_batch_size={prompts}",
            "data.max_response_length": f"data.max_response_length={new_tokens}",
            "actor_rollout_ref.rollout.n": f"actor_rollout_ref.rollout.n={generations}",
            "actor_rollout_ref.actor.ppo_mini_batch_size": f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": (
                f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={generations}"
            ),
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": (
                f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={generations}"
            ),
            "trainer.device": f"trainer.device={device}",
        }
    )
    return [
        *base.values(),
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "actor_rollout_ref.rollout.ignore_eos=true",
        f"actor_rollout_ref.actor.strategy={strategy}",
        *(["actor_rollout_ref.actor.fsdp_config.cpu_autocast=true"] if cpu_bf16 and device == "cpu" else []),
    ]


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The medians over the steps of :data:`REPORTED` (None where a run did not log the metric)."""
    return {name: common.median(common.series(rows, key), digits=8) for key, name in REPORTED.items()}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Both modes on one work; the JSON body."""
    env = common.bench_env(args.threads)
    with common.work_dir("moe-replay-", args.keep, log) as work:
        facts = prepare(work, args.size)
        results: dict[str, Any] = {}
        for mode, extra in MODES.items():
            runs = work / f"runs-{mode}"
            base = overrides(work, args.size, args.device, args.steps, runs, args.cpu_bf16, args.strategy)
            cmd = common.rlcore_command([*base, *extra])
            log(f"{mode}: {' '.join(extra) or 'replay off'}")
            child = common.run_checked(cmd, env, work / f"{mode}.log", f"the {mode} run")
            _, rows = common.read_metrics(runs)
            results[mode] = {**summary(rows), "wall_s": round(child.wall_s, 1)}
    off, replayed = results["off"]["probs_diff_mean"], results["R3"]["probs_diff_mean"]
    return {
        "size": args.size,
        "device": args.device,
        "cpu_bf16": args.cpu_bf16,
        "strategy": args.strategy,
        "steps": args.steps,
        "model": facts,
        "modes": results,
        "probs_diff_mean_ratio_R3_over_off": round(replayed / off, 4) if off and replayed is not None else None,
    }


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run both modes, print the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=tuple(REPLAY_MODELS), default="tiny")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--cpu-bf16", action="store_true", help="on the CPU: compute in bfloat16 (cpu_autocast)")
    parser.add_argument("--strategy", choices=("fsdp", "megatron"), default="fsdp")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the runs (0: leave unset)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    return common.run_main("moe_replay", args.threads, lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
